"""Who a sandbox's job is on the host: never uid 0. A root worker gives each sandbox a uid of
its own from ``SANDBOX_UIDS`` (isolate-style per-box uids), held by an flock under ``UID_LOCKS``
for the sandbox's life, so several workers on one host never share one (docs/security.md)."""

import fcntl
import functools
import os
import random
import stat
from pathlib import Path

from worker.harness import linux
from worker.sandbox.host import HARNESS, SandboxUnavailable, readonly_paths

SANDBOX_UIDS = range(60000, 61000)
UID_LOCKS = Path("/run/treino-sandbox")


def new_session_keyring() -> None:
    """Join a new, empty session keyring: no key of the worker's or of an earlier job is in
    reach (bwrap's seccomp filter refuses the keyring calls too)."""
    linux.join_session_keyring()


def _others_cannot_enter(directory: str) -> bool:
    info = os.stat(directory)
    return not info.st_mode & stat.S_IXOTH


@functools.cache
def _covers() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Where the read-only paths sit under a directory another uid cannot enter (a pyenv
    Python under a 0700 /root): each such top-most directory with the paths under it. The
    launcher, still root, lays a tmpfs over it in a mount namespace of its own and binds just
    those paths back, so a job's uid reaches them and nothing else of that directory."""
    hidden: dict[str, list[str]] = {}
    for path in [*readonly_paths(), str(HARNESS)]:
        parts = Path(path).parts
        for depth in range(2, len(parts)):  # the ancestors below /, outermost first
            ancestor = str(Path(*parts[:depth]))
            if _others_cannot_enter(ancestor):
                hidden.setdefault(ancestor, []).append(path)
                break
    return tuple((top, tuple(paths)) for top, paths in hidden.items())


def _private_view(covers: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    """In the child, before bwrap: a mount namespace of its own where every cover is a 0755
    tmpfs holding only the paths bound back under it. Nothing of this reaches the host."""
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    for top, paths in covers:
        fds = [os.open(p, os.O_PATH) for p in paths]
        linux.mount("tmpfs", top, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=0755,size=64k")
        for path, fd in zip(paths, fds, strict=True):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            linux.mount(f"/proc/self/fd/{fd}", path, None, linux.MS_BIND | linux.MS_REC)
            os.close(fd)


class Identity:
    """The host uid a sandbox runs as. A root worker gives each sandbox a uid of its own from
    SANDBOX_UIDS, held by an flock for the sandbox's life; any other worker runs sandboxes as
    itself (never uid 0, then)."""

    def __init__(self) -> None:
        self._lock: int | None = None
        if os.geteuid() != 0:
            self.uid, self.gid = os.getuid(), os.getgid()
            return
        UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
        for uid in random.sample(SANDBOX_UIDS, len(SANDBOX_UIDS)):
            fd = os.open(UID_LOCKS / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid = self.gid = uid
            self._lock = fd
            return
        raise SandboxUnavailable(f"all {len(SANDBOX_UIDS)} sandbox uids are in use")

    @property
    def switches(self) -> bool:
        return self._lock is not None

    def enter(self) -> None:
        """In the child, before exec'ing bwrap (root only): the private view, then the uid."""
        if self.switches:
            if covers := _covers():
                _private_view(covers)
            os.setgroups([])
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
