"""A fork-server template, the sandboxed side of ``worker.forkserver``:
``python -B -E -s -m harness.template CONTROL_FD FILTER_FD CONFIG DEVICE SANDBOX_ID``, started in
the read-only directory that holds the harness package alone (``worker/sandbox/host.py``,
``harness_command``, says why).

It warms up once (imports torch and every kind's harness; a tiny CPU step only where torch
has no GPU support compiled in, since the first backward starts autograd's device threads and,
on a GPU host, the CUDA driver; never CUDA), stays
single-threaded, says ``R`` on CONTROL_FD (a SOCK_SEQPACKET socket) and then, for each ``J``
message, whose three descriptors are one job's (its socket to the worker, its output and its
status pipe), forks. The job's trace file and done pipe are not among them: the worker makes
them at hand-off and sends them with the request, on a channel the job's init (B) made. The
template holds nothing a job could use: no learner's code or data ever reaches it (a job's
request goes straight to the job over the job's own channel), its environment is the sandbox's
scrubbed one, and each fork closes every descriptor but its job's.

Each job, in three processes (the first two ours only):

1. the fork (A) keeps only its job's descriptors; in a sandbox (CONFIG ``isolate``) it enters a
   new user namespace mapping the same uid, then new mount, PID, network (only ``lo``), IPC and
   UTS namespaces; forks B and waits for it. Each of A, B and C dies with its parent.
2. B is the init of the job's PID namespace (when it ends, the kernel kills every process left
   in it): it mounts the job's own tmpfs (/job, /tmp, /dev/shm) and a fresh /proc,
   masked as bubblewrap masks a single-use sandbox's, allows no more user namespaces, starts a
   new session and a new session keyring, and writes ``P`` on the job socket with one end of a
   socket pair it makes then (``run.offer``, the job's channel): the worker reads B's pid in its
   own namespace from the socket's credentials (and that B made the channel), moves B into the
   job's cgroup and only then sends, on the channel, the job's trace file and done pipe and the
   request (the "go"). B forks C, reaps whatever the job leaves it, and writes C's wait status on
   the status pipe once C ends.
3. C, the job: a cgroup namespace of its own, every capability dropped, no new privileges, the
   whole seccomp filter (FILTER_FD's program) stacked on the template's, then ``run.run_job``.
   On CUDA it initialises CUDA here, after the fork.

Without ``isolate`` (the process-only sandbox) the same three processes run with none of the
namespaces, mounts or filter, in a work directory the worker made for the job.
"""

import ctypes
import fcntl
import gc
import json
import os
import resource
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from typing import Any, NoReturn

from . import linux, run  # run: the single-use sandbox's entry (warm-up and the job part)
from .linux import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
)
from .protocol import Request, Word

JOB_FDS = 3  # job socket, output, status


# ---------------------------------------------------------------- A: namespaces


def settle_fds(fds: list[int]) -> tuple[int, int]:
    """Output on 1 and 2, the job's socket and status pipe on 3 and 4, nothing else open."""
    sock, output, status = fds
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (sock, status)]
    os.dup2(output, 1)
    os.dup2(output, 2)
    for target, fd in enumerate(moved, start=3):
        os.dup2(fd, target)
    os.closerange(5, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    return 3, 4


def enter_namespaces() -> None:
    """A user namespace mapping this uid (and gid) onto itself, then the rest; the PID namespace
    is the next child's."""
    uid, gid = os.getuid(), os.getgid()
    linux.unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    linux.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)


# ---------------------------------------------------------------- B: the job's init


def own_mounts(config: dict[str, Any]) -> None:
    """The job's own writable places and /proc, as bwrap gives a single-use sandbox."""
    linux.mount(None, "/", None, MS_REC | MS_PRIVATE)
    kept = [(path, os.open(path, os.O_PATH)) for path in config["keep"]]  # before they are covered
    for where, size in (
        ("/job", config["tmpfs_bytes"]),
        ("/tmp", config["tmpfs_bytes"]),
        ("/dev/shm", config["tmpfs_bytes"]),
    ):
        os.makedirs(where, exist_ok=True)
        linux.mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0755")
    for path, fd in kept:  # the interpreter or venv under /tmp (a clone there): back, read-only
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        linux.mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        linux.mount(
            None,
            path,
            None,
            MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
        )
        os.close(fd)
    linux.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # no user namespace below this one (the seccomp filter refuses them as well)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    for name in config["proc_read_only"]:
        path = f"/proc/{name}"
        if os.path.exists(path):
            linux.mount(path, path, None, MS_BIND | MS_REC)
            linux.mount(
                None,
                path,
                None,
                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            )
    for name in config["proc_hidden"]:
        path = f"/proc/{name}"
        if os.path.isfile(path):
            linux.mount("/dev/null", path, None, MS_BIND)
            linux.mount(
                None,
                path,
                None,
                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            )


def reap_until(child: int) -> int:
    """As init: reap every process that ends until ``child`` does; its wait status."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return status


# ---------------------------------------------------------------- C: the job


def drop_privileges(program: bytes) -> None:
    """No capability of any kind, no new privileges, then the whole filter."""
    linux.drop_capabilities()
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, what="prctl(PR_SET_NO_NEW_PRIVS)")
    filters = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(filters)))
    linux.prctl(linux.PR_SET_SECCOMP, linux.SECCOMP_MODE_FILTER, ctypes.addressof(fprog), what="seccomp")


def job(
    request: Request,
    config: dict[str, Any],
    program: bytes,
    trace: int,
    done: int,
    device: str,
    job_id: str,
    parent: int,
) -> NoReturn:
    """C: the job itself, in its own cgroup namespace, filtered (``drop_privileges``), in /job."""
    isolate = config["isolate"]
    if isolate:
        linux.unshare(CLONE_NEWCGROUP)  # it is in its own cgroup now
        drop_privileges(program)
        work = "/job"
    else:
        work = request["work_dir"]
        os.environ.update(HOME=work, TMPDIR=os.path.join(work, "tmp"))
        tempfile.tempdir = None
    os.chdir(work)
    die_with_parent(parent)  # B
    sys.argv = [run.__file__, work, "-1", device, job_id]  # as ``harness.run`` sees its own
    if device == "cuda":
        run.warm_up("cuda")  # the template never touched CUDA: the job creates its context
    run.run_job(work, request, trace, done)


# ---------------------------------------------------------------- one fork


def die_with_parent(parent: int | None = None) -> None:
    """SIGKILL when the parent goes (set after any change of credentials, which clears it); if
    it is already gone, go now."""
    linux.die_with_parent(signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def fork_job(
    fds: list[int], config: dict[str, Any], program: bytes, device: str, job_id: str, template: int
) -> NoReturn:
    """A (this process, a fork of the template): waits for B, dies with the template; never
    returns. Each of A, B and C dies with its parent, so a job never outlives its template (under
    bwrap its PID namespaces see to that too)."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock, status = settle_fds(fds)
        if config["isolate"]:
            enter_namespaces()
        die_with_parent(template)
        child = os.fork()
        if child == 0:
            init(sock, status, config, program, device, job_id)
        for fd in (sock, status):
            os.close(fd)
        os.waitpid(child, 0)
    except BaseException:  # noqa: BLE001 (ours: the worker sees no "P" and replaces the template)
        traceback.print_exc()
    finally:
        os._exit(0)


def init(
    sock: int, status: int, config: dict[str, Any], program: bytes, device: str, job_id: str
) -> NoReturn:
    """B: never returns."""
    try:
        die_with_parent()  # A: outside our PID namespace, so no getppid() to compare
        if config["isolate"]:
            own_mounts(config)
        else:  # the job's orphans come to us, not to the host's init
            linux.become_subreaper()
        os.setsid()
        linux.join_session_keyring()
        # the worker reads our pid from the socket's credentials, and takes the channel we make
        # now (out of every job's reach: not dumpable as a fork of the template, or behind the
        # PID namespaces under bwrap) only if the kernel says we made it
        job_sock = socket.socket(fileno=sock)
        channel = run.offer(job_sock, Word.FORKED)
        job_sock.close()
        request, trace, done = run.receive(channel)  # the go: we are in the job's cgroup
        me = os.getpid()
        child = os.fork()
        if child == 0:
            os.close(status)
            try:
                job(request, config, program, trace, done, device, job_id, me)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                os._exit(1)
        os.close(trace)
        os.close(done)
        linux.not_dumpable()  # the job cannot open our memory through /proc
        os.write(status, struct.pack("i", reap_until(child)))
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(0)


# ---------------------------------------------------------------- the template


def serve(control: socket.socket, config: dict[str, Any], program: bytes, device: str) -> None:
    """Fork one job per ``J`` message until the worker closes its end."""
    jobs, template = 0, os.getpid()
    while True:
        message, fds, _, _ = socket.recv_fds(control, 16, JOB_FDS)
        if not message:
            return
        if message != Word.FORK or len(fds) != JOB_FDS:
            for fd in fds:
                os.close(fd)
            continue
        jobs += 1
        sys.stdout.flush()
        sys.stderr.flush()
        if fork() == 0:
            control.detach()  # its descriptor is closed with the rest; never by this object
            fork_job(fds, config, program, device, f"{sys.argv[-1]}-{jobs}", template)
        for fd in fds:  # a fork that failed: the worker sees the job's socket close with no "P"
            os.close(fd)


def fork(attempts: int = 200) -> int:
    """os.fork, waiting out a moment without processes to spare (a fork bomb's processes take a
    moment to go: the uid's RLIMIT_NPROC counts every job of this template); -1 if it fails."""
    for _ in range(attempts):
        try:
            return os.fork()
        except BlockingIOError:
            time.sleep(0.01)
    return -1


def threads() -> list[str]:
    """The names of this process's threads (the kernel's, so native ones count too)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names


def probe(config: dict[str, Any]) -> NoReturn:
    """``template.py --probe CONFIG``: whether a job's sandbox can be made here (its namespaces
    and mounts, nothing run in it); the exit status says (``worker.forkserver.problem``)."""
    enter_namespaces()
    pid = os.fork()
    if pid == 0:
        try:
            own_mounts(config)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def main(argv: list[str]) -> None:
    if argv[0] == "--probe":
        probe(json.loads(argv[1]))
    control = socket.socket(fileno=int(argv[0]))
    filter_fd, config, device = int(argv[1]), json.loads(argv[2]), argv[3]
    if not config["isolate"]:
        # every job shares this /proc: the template, and each job's A and B, which hold its
        # trace and done pipe before its supervisor does, are not dumpable (under bwrap, A writes
        # its uid map first, and the job's PID namespace hides them all from it)
        linux.not_dumpable()
    program = b""
    if filter_fd >= 0:
        with os.fdopen(filter_fd, "rb") as f:
            program = f.read()
    run.quiet.silence()
    import torch

    # a build without CUDA (or ROCm) starts no autograd device threads: the step is safe there
    run.warm_up("cpu", autograd=torch.version.cuda is None and torch.version.hip is None)

    torch.set_num_threads(1)
    if torch.cuda.is_initialized():  # a fork cannot use a context its parent made
        raise SystemExit("template: CUDA was initialised during the warm-up")
    if len(names := threads()) != 1:  # a fork copies one thread: a lock another held stays held
        raise SystemExit(f"template: {len(names)} threads after warm-up ({', '.join(names)}), forks need one")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # each job's A is reaped by the kernel
    gc.freeze()  # the warm-up's objects stay shared with every fork (no refcount-driven copies)
    control.send(Word.READY)
    serve(control, config, program, device)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
