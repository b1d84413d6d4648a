"""Sandboxes forked from a template: a verdict at fork speed (Chromium's zygote and sandbox2's
fork-server are the models).

A ``ForkServer`` keeps one template per worker: a sandbox started like every other (its own uid
when the worker is root, rlimits, a cgroup, bubblewrap with the seccomp filter), running
``worker/harness/template.py``, which has imported torch and the harness once, never touches
CUDA and stays single-threaded. Each job is a fork of it that enters a sandbox of its own before
any of the learner's code runs: new user, mount, PID, network and IPC namespaces, its own tmpfs
for /job, /tmp and /dev/shm, a fresh masked /proc, a new session keyring, no capabilities, the
whole seccomp filter, its own cgroup and limits (the template's docstring has the steps). So a
job costs a few forks and mounts instead of an interpreter that imports torch (seconds), and
jobs stay as isolated from each other, from the template and from the host as single-use
sandboxes are. The template runs at most one uid for all its jobs: they are kept apart by
their namespaces, not by uids.

After each job the next job's sandbox is forked ahead (its namespaces and mounts made, its
init waiting for a request), while nobody waits: a learner who resubmits at once finds it ready.

The job's pid reaches the worker through the credentials of the job's own socket (the kernel
translates it into the worker's PID namespace), with the job's channel, which its init made
(``sandbox.job``): the worker moves the job into its cgroup and only then makes the job's trace
file and done pipe and sends them with the request on that channel. The wall clock, a cancel or
the memory watch kill the job's PID namespace (its init) and sweep its cgroup.

A template that dies or misbehaves (no job within ``FORK_SECONDS``, or a job whose credentials
are not its own) is killed and replaced, and the job it failed runs in a cold single-use
sandbox instead: no job is lost. ``ForkServer`` has the job interface of ``worker.pool.Pool``
(``run``, ``warm``, ``close``); ``TREINO_SANDBOX_START`` chooses between them.
"""

import contextlib
import functools
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker import sandbox
from worker.harness import linux
from worker.harness.protocol import Word
from worker.pool import Pool, Starter
from worker.sandbox import PIDS, Cancel, Cgroup, Limits, Result, Sandbox, Setup
from worker.sandbox.host import HARNESS_ROOT, harness_command

log = logging.getLogger("treino.forkserver")

FORK_SECONDS = 10.0  # fork request -> the job's "P": a template slower than this is replaced
WARM_UP_FAILURES = 2  # templates in a row that never got warm: this host cannot fork, exec instead
STATUS_SECONDS = 1.0  # the job ended on its own -> its init reports how


class TemplateTrouble(RuntimeError):
    """The template did not fork the job as asked: it is replaced, the job runs cold."""


@functools.cache
def problem(isolation: str) -> str | None:
    """Why jobs cannot be forked from a template here, or None; probed once per process with
    the template's own launcher and the namespaces and mounts of one job."""
    if isolation != "bwrap":
        return None  # the process-only sandbox makes no namespaces
    command = harness_command("template", "--probe", sandbox.template_config(True))
    try:
        done = sandbox.run_isolated(command, timeout=30, forks=True, chdir=HARNESS_ROOT)
    except (OSError, subprocess.SubprocessError, sandbox.SandboxUnavailable) as exc:
        return f"the template's bwrap did not start: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        return f"a job's namespaces cannot be made: {reason[-1]}"
    return None


def runner(start: str, setup: Setup, size: int) -> "ForkServer | Pool":
    """What runs a grader's jobs: forks of a template where ``start`` (``TREINO_SANDBOX_START``)
    is "fork", warm sandboxes are wanted (``size`` > 0) and jobs can be forked here; else a pool
    of ``size`` single-use sandboxes (0: a cold one per job, as `treino check` runs)."""
    if start == "fork" and size > 0:
        why = problem(setup.isolation)
        if why is None:
            return ForkServer(setup.isolation, setup.device, setup.gpu, fallback_size=size)
        log.warning("sandbox: jobs cannot be forked here (%s): single-use sandboxes instead", why)
    return Pool(size, functools.partial(Sandbox, setup.isolation, setup.device, setup.gpu))


class ForkedJob(sandbox.Job):
    """One job forked from a template: its output and status files (created here), its cgroup,
    its init's pid and channel once it has said so, and the trace file and done pipe made at
    hand-off (``sandbox.Job.run``)."""

    def __init__(self, template: Sandbox) -> None:
        self.template, self.device = template, template.device
        self.id = f"{template.id}-{secrets.token_hex(3)}"
        self.cgroup: Cgroup | None = None
        self.pid, self.pidfd = 0, -1
        self.channel: socket.socket | None = None  # the init's, sent with its "P"
        self._root = Path(tempfile.mkdtemp(prefix="treino-job-")) if template.isolation == "process" else None
        linux.not_dumpable()  # no job of our uid may open these through /proc (sandbox.Sandbox)
        self.output = os.memfd_create("treino-output", os.MFD_CLOEXEC)
        self.trace = self.done = -1  # made at hand-off (sandbox.hand_over), never before
        self.status, status = os.pipe2(os.O_CLOEXEC)  # the job's init: how the job ended
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the sender's pid, ours
        try:
            template.fork([theirs.fileno(), self.output, status])
        except OSError as exc:
            self.close()
            raise TemplateTrouble(f"template {template.id} is gone ({exc})") from exc
        finally:
            theirs.close()
            os.close(status)

    def _started(self, timeout: float) -> int:
        """The job's init's pid in this process's namespace, from the credentials the kernel
        attached to its "P", and its channel (made by that same process, by the kernel's
        record); TemplateTrouble if none comes, or not from this template's uid and tree."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            raise TemplateTrouble(f"template {self.template.id}: no job within {timeout:.0f} s")
        data, channel, creds = sandbox.receive_word(self.sock)
        if data != Word.FORKED or creds is None or channel is None:
            if channel is not None:
                channel.close()
            raise TemplateTrouble(f"template {self.template.id}: no job ({data!r})")
        self.channel = channel
        pid, uid, _ = creds
        identity = self.template.identity
        expected = identity.uid if identity is not None else os.getuid()
        if (
            uid != expected
            or not sandbox.descends(pid, self.template.proc.pid)
            or sandbox.channel_maker(channel) != (pid, uid)
        ):
            raise TemplateTrouble(
                f"template {self.template.id}: a job of uid {uid}, pid {pid} that is not its own"
            )
        return pid

    def _ready(self, limits: Limits) -> sandbox.Handoff:
        """Wait for the fork (forked ahead, it is there) and put it in its cgroup; its init's
        channel taken (TemplateTrouble if it cannot be: the job then runs cold)."""
        self.pid = self._started(FORK_SECONDS)
        try:
            self.pidfd = os.pidfd_open(self.pid)
            self.cgroup = Cgroup.create(f"treino-{self.id}")
            if self.cgroup is not None:
                self.cgroup.limit(limits.memory_mb * 1024 * 1024, PIDS)
                self.cgroup.attach(self.pid)
        except OSError as exc:  # never run a job outside its cgroup
            self.kill()
            raise TemplateTrouble(f"job {self.id} could not be confined: {exc}") from exc
        channel, self.channel = self.channel, None
        assert channel is not None  # _started took it
        self.sock.close()  # the job gets no way back to the worker but the "D"
        extra: dict[str, object] = {"work_dir": str(self._root)} if self._root is not None else {}
        return sandbox.Handoff(self.pid, channel, self.output, 0, extra, timed=True)

    def _returncode(self, end: str) -> int | None:
        """How the job ended, as its init saw it (None if the init was killed first)."""
        ready, _, _ = select.select([self.status], [], [], 0 if end == "done" else STATUS_SECONDS)
        data = os.read(self.status, 4) if ready else b""
        if len(data) != 4:
            return None
        return os.waitstatus_to_exitcode(struct.unpack("i", data)[0])

    def kill(self) -> None:
        """The job's init (its PID namespace dies with it), and whatever is left in its cgroup;
        without namespaces, its session's process group too, while its init is still there."""
        if self.pidfd >= 0:
            alive = not select.select([self.pidfd], [], [], 0)[0]
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            if alive and self._root is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None:
            for pid in self.cgroup.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill it (if still running) and free everything it held."""
        self.kill()
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None
        for fd in (self.output, self.trace, self.done, self.status, self.pidfd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.output = self.trace = self.done = self.status = self.pidfd = -1
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def _ended(template: Sandbox, grace: float = 1.0) -> bool:
    """Whether the template is gone, or goes within ``grace`` (its jobs die a moment before its
    launcher does)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        template.proc.wait(timeout=grace)
    return template.proc.poll() is not None


class ForkServer(Starter):
    """One template, kept running by a thread of its own (bubblewrap's --die-with-parent follows
    the thread that started it), and a fork of it per job."""

    def __init__(
        self,
        isolation: str,
        device: str,
        gpu: int | None = None,
        start: Callable[[], Sandbox] | None = None,
        fallback_size: int = 2,
    ) -> None:
        """Start the template; returns once it is started (not yet warm). Should templates never
        get warm here (``WARM_UP_FAILURES`` in a row: say, a library that starts threads in
        every process), jobs go to a pool of ``fallback_size`` single-use sandboxes instead."""
        self.isolation, self.device, self.gpu = isolation, device, gpu
        self.size, self.fallback_size = 1, fallback_size
        self._fallback: Pool | None = None
        self._cold_starts = 0  # templates in a row that did not get warm
        self._start = start or functools.partial(Sandbox, isolation, device, gpu, template=True)
        self._template: Sandbox | None = None
        self._standby: ForkedJob | None = None  # the next job's sandbox, forked ahead
        self._changed = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._keeper = threading.Thread(target=self._keep, name="treino-template", daemon=True)
        self._keeper.start()
        with self._changed:
            while self._template is None and self._error is None:
                self._changed.wait()
            if self._template is None:
                self._closed = True
                self._changed.notify_all()
                raise self._error

    def _keep(self) -> None:
        """The template's thread: start one whenever there is none alive."""
        while True:
            with self._changed:
                while not self._closed and self._template is not None and self._template.alive():
                    self._changed.wait(timeout=1)
                if self._closed or self._fallback is not None:
                    return
                old, self._template = self._template, None
            if old is not None:
                log.warning("template %s ended: starting another", old.id)
                old.close()
            template = self._try_start("a template")
            if template is None:
                continue
            with self._changed:
                if self._closed:
                    template.close()
                    return
                self._template, self._error = template, None
                self._changed.notify_all()

    def _current(self) -> Sandbox | None:
        """The template (waiting for one being started); None once jobs go to the fallback."""
        with self._changed:
            while self._template is None and not self._closed and self._fallback is None:
                self._changed.wait()
            if self._closed:
                raise RuntimeError("the fork server is closed")
            return self._template if self._fallback is None else None

    def _replace(self, template: Sandbox) -> None:
        """Kill a template that failed a job; the thread starts another."""
        with self._changed:
            if self._template is template:
                self._template = None
                self._changed.notify_all()
        template.close()

    def _not_warm(self, template: Sandbox) -> None:
        """A template that died or hung in its warm-up: replaced (by the caller); the second in
        a row means forking does not work on this host, and single-use sandboxes take over."""
        why = f"template {template.id} did not warm up"
        with self._changed:
            self._cold_starts += 1
            give_up = self._cold_starts >= WARM_UP_FAILURES and self._fallback is None
        if give_up:
            log.error(
                "%s templates in a row did not warm up (the last said: %s): jobs run in "
                "single-use sandboxes from now on",
                self._cold_starts,
                template.tail() or "nothing",
            )
            fallback = Pool(
                self.fallback_size, functools.partial(Sandbox, self.isolation, self.device, self.gpu)
            )
            with self._changed:
                self._fallback = fallback
                self._changed.notify_all()
        raise TemplateTrouble(why)

    def _take(self, template: Sandbox) -> "ForkedJob":
        """The sandbox forked ahead for the next job (if it is this template's), else a new fork."""
        with self._changed:
            standby, self._standby = self._standby, None
        if standby is not None and standby.template is template:
            return standby
        if standby is not None:
            sandbox.release(standby)
        return ForkedJob(template)

    def _fork_ahead(self, template: Sandbox) -> None:
        """After a job, fork the next one's sandbox while nobody waits for it (a learner who
        resubmits at once finds it ready); not during a job, whose cores it would share."""
        with self._changed:
            if self._closed or self._standby is not None or self._template is not template:
                return
        try:
            standby: ForkedJob | None = ForkedJob(template)
        except TemplateTrouble:
            return  # the next job finds out, and replaces the template
        with self._changed:
            if not self._closed and self._standby is None and self._template is template:
                self._standby, standby = standby, None
        if standby is not None:
            sandbox.release(standby)

    def run(
        self, kind: str, spec: dict[str, Any], code: bytes, limits: Limits, cancel: Cancel | None = None
    ) -> Result:
        """Run one job in a fork of the template; in a cold single-use sandbox if the template
        fails it (the template is then replaced)."""
        template = self._current()
        if template is None:
            assert self._fallback is not None
            return self._fallback.run(kind, spec, code, limits, cancel)
        try:
            if not template.ready(sandbox.WARM_UP_SECONDS):
                self._not_warm(template)
            forked = self._take(template)
        except TemplateTrouble as exc:
            return self._cold(template, exc, kind, spec, code, limits, cancel)
        try:
            result = forked.run(kind, spec, code, limits, cancel)
            if result.status == "crashed" and _ended(template):  # it took the job down with it
                raise TemplateTrouble(f"template {template.id} ended during job {forked.id}")
            with self._changed:
                self._cold_starts = 0
        except TemplateTrouble as exc:
            return self._cold(template, exc, kind, spec, code, limits, cancel)
        finally:
            sandbox.release(forked)
        self._fork_ahead(template)
        return result

    def _cold(
        self,
        template: Sandbox,
        why: Exception,
        kind: str,
        spec: dict[str, Any],
        code: bytes,
        limits: Limits,
        cancel: Cancel | None,
    ) -> Result:
        log.error(
            "%s; the job runs in a single-use sandbox (template said: %s)", why, template.tail() or "nothing"
        )
        self._replace(template)
        return Sandbox(self.isolation, self.device, self.gpu).run(kind, spec, code, limits, cancel)

    def warm(self) -> int:
        """1 when the template is ready to fork a job now, else 0 (or the fallback pool's)."""
        with self._changed:
            template, fallback = self._template, self._fallback
        if fallback is not None:
            return fallback.warm()
        return int(template is not None and template.ready())

    def close(self) -> None:
        with self._changed:
            self._closed = True
            template, self._template = self._template, None
            standby, self._standby = self._standby, None
            fallback = self._fallback
            self._changed.notify_all()
        if fallback is not None:
            fallback.close()
        if standby is not None:
            standby.close()
        if template is not None:
            template.close()
        self._keeper.join(timeout=30)
