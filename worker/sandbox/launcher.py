"""The single-use ``Sandbox``: started warming up (the harness imports torch and, on a GPU,
creates the CUDA context), then given one job; ``run`` hands the job over, waits under the
job's wall-clock limit until the harness says the trace is written (or the sandbox ends), kills
the whole tree and reads back the trace. A fork server's template is started by the same
launcher (``Sandbox(template=True)``)."""

import contextlib
import logging
import os
import resource
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from contracts.limits import Limits
from worker import seccomp
from worker.harness import linux
from worker.harness.protocol import Word
from worker.sandbox.bwrap import bwrap_args, template_config
from worker.sandbox.cgroup import PIDS, Cgroup
from worker.sandbox.host import HARNESS, HARNESS_PACKAGE, HARNESS_ROOT, environment, harness_command
from worker.sandbox.identity import Identity, new_session_keyring
from worker.sandbox.job import (
    SANDBOX_START,
    Handoff,
    Job,
    Result,
    channel_maker,
    descends,
    receive_word,
)
from worker.sandbox.reaper import release
from worker.sandbox.watch import Cancel

log = logging.getLogger("treino.sandbox")

FILE_LIMIT = 16 * 1024 * 1024  # any file the child writes (its output, the trace)
OPEN_FILES = 256  # torch opens a few dozen shared libraries while importing
WARM_UP_SECONDS = 180  # importing torch on a slow, busy CPU; not part of any job's limit
CPU_CEILING = 600 + WARM_UP_SECONDS  # hard RLIMIT_CPU; the harness lowers it for the job


class Sandbox(Job):
    """One single-use sandbox: started warming up, given one job (``Job.run``), then gone.

    ``template``: started the same way (uid, cgroup, rlimits, bwrap or a plain process), but
    running the harness's ``template.py``, which forks a sandbox per job (``worker.forkserver``)
    instead of running one itself."""

    def __init__(
        self, isolation: str = "process", device: str = "cpu", gpu: int | None = None, template: bool = False
    ) -> None:
        self.isolation, self.device, self.template = isolation, device, template
        self.id = secrets.token_hex(6)
        self.started = time.monotonic()
        self._root: Path | None = None
        self._used = False
        self._channel: socket.socket | None = None  # the harness's, sent with its "R" (job.py)
        self._refused = False  # its "R" came with no channel of its own making: never used
        self._word = threading.Lock()
        self.identity = Identity() if isolation == "bwrap" else None
        self.cgroup = Cgroup.create(f"treino-{self.id}")
        if self.cgroup is not None:
            self.cgroup.limit(4 * 1024**3, PIDS)  # for the warm-up; the job's come at hand-off
        # this process holds every job's trace and "done" pipe: a job of its uid (the
        # process-only sandbox of a worker that is not root) must not reach them through /proc
        linux.not_dumpable()
        self._output = os.memfd_create("treino-output", os.MFD_CLOEXEC)
        self.trace = self.done = -1  # made at hand-off (job.hand_over), never before
        # a template's control socket carries one message (and a job's descriptors) per job
        self._sock, child_sock = socket.socketpair(
            socket.AF_UNIX, socket.SOCK_SEQPACKET if template else socket.SOCK_STREAM
        )
        try:
            self.proc = self._spawn(child_sock.fileno(), gpu)
        except BaseException:
            self._sock.close()
            self._release()
            raise
        finally:
            child_sock.close()

    def _spawn(self, child_sock: int, gpu: int | None) -> subprocess.Popen:
        own: list[int] = []  # descriptors opened for the child only: closed once it has them
        if self.isolation == "bwrap":
            work, start = "/job", HARNESS_ROOT
            own.append(seccomp.fd(seccomp.TEMPLATE_ALLOWS if self.template else ()))
            assert self.identity is not None  # every bwrap sandbox has one
            prefix = bwrap_args(self.device, gpu, self.identity.uid, own[0], forks=self.template, chdir=start)
            cwd = "/"  # bwrap's own, on the host; inside, it starts the harness in ``start``
        else:  # the package copied alone into a folder of its own: the job's folder is beside it
            self._root = Path(tempfile.mkdtemp(prefix="treino-job-"))
            shutil.copytree(
                HARNESS,
                self._root / "lib" / HARNESS_PACKAGE,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
            (self._root / "job").mkdir()
            work, start, prefix = str(self._root / "job"), str(self._root / "lib"), []
            cwd = start
        if self.template:
            job_filter = seccomp.fd() if self.isolation == "bwrap" else -1
            own += [job_filter] if job_filter >= 0 else []
            program = harness_command(
                "template", str(child_sock), str(job_filter), template_config(self.isolation == "bwrap")
            )
            fds = [child_sock]
        else:
            program = harness_command("run", work, str(child_sock))
            fds = [child_sock]
        argv = [*prefix, *program, self.device, self.id]
        env = environment(work)
        if self.isolation == "process" and self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU sandbox has no GPU (bwrap binds none in)
        elif self.isolation == "process" and "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        try:
            return subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=self._output,
                start_new_session=True,
                pass_fds=fds + own,
                close_fds=True,
                preexec_fn=self._child_setup(),
            )
        finally:
            for fd in own:
                os.close(fd)

    def _child_setup(self):
        """Runs in the child between fork and exec: join the cgroup, set the rlimits, then
        become the sandbox's uid (bwrap only; see ``Identity.enter``)."""
        procs = self.cgroup.procs_files() if self.cgroup else []
        table = [
            (resource.RLIMIT_CPU, (CPU_CEILING, CPU_CEILING)),
            (resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT)),
            (resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES)),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        identity = self.identity if self.isolation == "bwrap" else None
        if identity is not None and (identity.switches or self.cgroup is None):
            nproc = PIDS if identity.switches else PIDS * 4  # every process of its host uid
            table.append((resource.RLIMIT_NPROC, (nproc, nproc)))

        def apply() -> None:
            pid = str(os.getpid()).encode()
            for path in procs:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)
            for which, value in table:
                resource.setrlimit(which, value)
            if identity is not None:
                identity.enter()
            else:  # bwrap's --die-with-parent does this for its own sandboxes
                linux.die_with_parent(signal.SIGKILL)
            new_session_keyring()

        return apply

    # ------------------------------------------------------------ state

    def ready(self, timeout: float = 0) -> bool:
        """True once warmed up (the harness said so); False if not yet, or dead. A sandbox's
        "R" brings its harness's channel (``job.py``): taken here once, and only if the kernel
        says a process of this sandbox made it; otherwise the sandbox is never used."""
        if self._used or self._refused or self.proc.poll() is not None:
            return False
        with self._word:
            if self._channel is not None:
                return True
            with selectors.DefaultSelector() as sel:
                sel.register(self._sock, selectors.EVENT_READ)
                if not sel.select(timeout):
                    return False
            try:
                if self.template:
                    return self._sock.recv(1, socket.MSG_PEEK) == Word.READY
                word, channel, _ = receive_word(self._sock)
            except OSError:
                return False
            if word == Word.READY and channel is not None and self._own(channel):
                self._channel = channel
                return True
            if channel is not None:
                channel.close()
            self._refused = True
            if word:  # not merely its end (a sandbox that died warming up)
                log.error("sandbox %s: its ready word came without a channel of its own", self.id)
            return False

    def _own(self, channel: socket.socket) -> bool:
        """Whether ``channel`` was made by a process of this sandbox (its harness), as its uid."""
        try:
            pid, uid = channel_maker(channel)
        except OSError:
            return False
        expected = self.identity.uid if self.identity is not None else os.getuid()
        return uid == expected and descends(pid, self.proc.pid)

    def alive(self) -> bool:
        return not self._used and not self._refused and self.proc.poll() is None

    def tail(self, limit: int = 500) -> str:
        """The end of what it printed itself (its warm-up; a template's own errors), for logs;
        "" once it was closed (a fork server's keeper thread closes a dead template while a job
        that failed on it logs why)."""
        try:
            size = os.fstat(self._output).st_size
            data = os.pread(self._output, limit, max(0, size - limit))
        except OSError:
            return ""
        return data.decode("utf-8", "replace").strip()

    def fork(self, fds: list[int]) -> None:
        """A template's: fork a job that gets these descriptors (its socket, output, trace, done
        and status pipes; ``worker.forkserver``). OSError when the template is gone."""
        socket.send_fds(self._sock, [Word.FORK], fds)

    # ------------------------------------------------------------ the job

    def run(self, kind: str, spec: dict, code: bytes, limits: Limits, cancel: Cancel | None = None) -> Result:
        """Hand one job over and wait for its end (or ``cancel``); the sandbox is gone afterwards."""
        if self._used or self.template:
            raise RuntimeError("a sandbox runs one job only (a template forks them)")
        try:
            return super().run(kind, spec, code, limits, cancel)
        finally:
            release(self)

    def _ready(self, limits: Limits) -> Handoff | Result:
        """Warm (its channel taken), with the job's limits on its cgroup."""
        if not self.ready(WARM_UP_SECONDS):
            self.kill()
            log.error("sandbox %s did not warm up: %s", self.id, self.tail())
            return Result("crashed", None, 0, "", self.proc.returncode, SANDBOX_START)
        self._used = True
        channel, self._channel = self._channel, None
        assert channel is not None  # ready() took it
        skip = os.fstat(self._output).st_size  # the warm-up's output is ours, not the learner's
        if self.cgroup is not None:
            self.cgroup.limit(limits.memory_mb * 1024 * 1024, PIDS)
        return Handoff(self.proc.pid, channel, self._output, skip)

    def _returncode(self, end: str) -> int | None:
        return self.proc.wait() if end != "done" else self.proc.poll()

    def kill(self) -> None:
        """The whole tree: bwrap's PID 1 takes its namespace down with it; the cgroup sweep
        catches what left the process group (the process-only sandbox)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            for pid in self.cgroup.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill it (if still running) and free everything it held."""
        self._used = True
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._release()

    def _release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None
        for fd in (self._output, self.trace, self.done):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._output = self.trace = self.done = -1
        if self.identity is not None:  # its uid is free once nothing of it runs
            self.identity.release()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
