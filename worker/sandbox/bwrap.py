"""bubblewrap's command line: the namespaces, the read-only view of the host, the masked /proc,
the minimal /dev (plus the assigned GPU's nodes), the seccomp filter; and what a fork-server
template's jobs make of their own sandbox (``template_config``)."""

import functools
import json
import os
import re
import subprocess

from worker import seccomp
from worker.sandbox.host import (
    HARNESS,
    HARNESS_PACKAGE,
    HARNESS_ROOT,
    TMPFS_BYTES,
    SandboxUnavailable,
    environment,
    readonly_paths,
)
from worker.sandbox.identity import Identity, new_session_keyring

# The bubblewrap program: TREINO_BWRAP, an absolute path (a bundle's, bench/gpu_kit.py), read
# from the environment as CUDA_VISIBLE_DEVICES is; else ``bwrap`` on the sandbox's PATH.
BWRAP = os.environ.get("TREINO_BWRAP") or "bwrap"
# /proc entries that are host knobs or host information: read-only, or hidden behind /dev/null
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_HIDDEN = (
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
)
DEVICES = ("null", "zero", "full", "random", "urandom")
JOB_TMPFS = ("/job", "/tmp", "/dev/shm")  # each forked job's own, over the template's


def driver_libraries(ldconfig: str) -> list[str]:
    """The NVIDIA driver's user-space libraries listed by ``ldconfig -p`` (64-bit only)."""
    found = []
    for line in ldconfig.splitlines():
        m = re.match(r"\s*(lib(?:cuda|nvidia-[\w.-]+?)\.so[.\d]*) \((.*?)\) => (\S+)", line)
        if m and "x86-64" in m.group(2):
            found.append(m.group(3))
    return sorted(set(found))


def gpu_args(gpu: int, dev: str = "/dev", ldconfig: str | None = None) -> list[str]:
    """The assigned GPU's device nodes and the driver libraries not already visible.

    ``/dev/nvidia-uvm-tools`` (profiling) and the other GPUs' nodes stay out."""
    args = []
    for name in (f"nvidia{gpu}", "nvidiactl", "nvidia-uvm"):
        node = os.path.join(dev, name)
        if not os.path.exists(node):
            raise SandboxUnavailable(f"{node} is missing")
        args += ["--dev-bind", node, f"/dev/{name}"]
    if ldconfig is None:
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    seen = tuple(p + "/" for p in readonly_paths())
    for lib in driver_libraries(ldconfig):
        for path in {lib, os.path.realpath(lib)}:
            if not path.startswith(seen):
                args += ["--ro-bind", path, path]
    return [*args, "--ro-bind-try", "/sys", "/sys"]  # NVML and the driver read topology there


def bwrap_args(
    device: str, gpu: int | None, uid: int, seccomp_fd: int, forks: bool = False, chdir: str = "/job"
) -> list[str]:
    """bwrap's command line. ``uid`` is the job's host uid and its uid inside too: mapped onto
    itself, with no intermediate namespace (bwrap nests one for ``--dev``, whose own root would
    then show in the job's uid_map), so ``/proc/self/uid_map`` names the real outer uid.

    ``forks``: for a fork-server template (``worker.forkserver``), whose jobs make namespaces
    of their own: no ``--disable-userns``, and a plain /proc (the kernel refuses a new /proc
    where the one in view has locked over-mounts; each job masks its own fresh one the same
    way, ``PROC_READ_ONLY`` and ``PROC_HIDDEN``).

    ``chdir``: where the command starts; the harness starts in ``HARNESS_ROOT``, where the
    package is the only thing there (``host.harness_command``)."""
    args = [
        BWRAP,
        "--unshare-user",
        "--uid",
        str(uid),
        "--gid",
        str(uid),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *([] if forks else ["--disable-userns"]),
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--seccomp",
        str(seccomp_fd),
    ]
    # the writable tmpfs first: a read-only path may live under /tmp (a checkout there)
    args += ["--proc", "/proc"]
    for place in ("/dev/shm", "/tmp", "/job"):  # /dev/shm: DataLoader workers pass batches there
        args += ["--size", str(TMPFS_BYTES), "--tmpfs", place]
    for name in () if forks else PROC_READ_ONLY:  # its own /proc's entries, read-only onto themselves
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in () if forks else PROC_HIDDEN:
        if os.path.isfile(f"/proc/{name}"):
            args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for name in DEVICES:
        args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        args += ["--symlink", target, f"/dev/{link}"]
    for path in readonly_paths():
        args += ["--ro-bind", path, path]
    for top in ("/lib", "/lib64", "/lib32", "/bin"):  # merged /usr: links; otherwise the dirs
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif top != "/bin" and os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind", str(HARNESS), f"{HARNESS_ROOT}/{HARNESS_PACKAGE}"]
    if device == "cuda" and gpu is not None:
        args += gpu_args(gpu)
    return [*args, "--remount-ro", "/", "--chdir", chdir]


def _enter(identity: Identity) -> None:
    """Between fork and exec of a sandbox's launcher: its uid, then a keyring of its own."""
    identity.enter()
    new_session_keyring()


def run_isolated(
    command: list[str], timeout: float, forks: bool = False, chdir: str = "/job"
) -> subprocess.CompletedProcess:
    """``command`` under bwrap on the CPU, as a sandbox would run it (uid, view, filter, scrubbed
    environment), started in ``chdir``: the start-up probes and ``bench/sandbox.py``. ``forks``:
    as a fork-server template runs (see ``bwrap_args``)."""
    identity = Identity()
    filter_fd = seccomp.fd(seccomp.TEMPLATE_ALLOWS if forks else ())
    try:
        return subprocess.run(
            [*bwrap_args("cpu", None, identity.uid, filter_fd, forks, chdir), *command],
            env=environment("/job"),
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            pass_fds=(filter_fd,),
            preexec_fn=functools.partial(_enter, identity),
        )
    finally:
        os.close(filter_fd)
        identity.release()


def under_job_tmpfs(paths: list[str]) -> list[str]:
    """Those of ``paths`` that a forked job's own tmpfs would cover (a venv in /tmp, say): the job
    binds them back, read-only, over its tmpfs."""
    return [p for p in paths if any(p.startswith(place + "/") for place in JOB_TMPFS)]


def template_config(isolate: bool) -> str:
    """What a template's jobs make of their sandbox (``worker/harness/template.py``), as JSON."""
    return json.dumps(
        {
            "isolate": isolate,
            "keep": under_job_tmpfs(readonly_paths()),
            "tmpfs_bytes": TMPFS_BYTES,
            "proc_read_only": PROC_READ_ONLY,
            "proc_hidden": PROC_HIDDEN,
        },
        separators=(",", ":"),
    )
