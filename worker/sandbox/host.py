"""What of the host a sandbox is given: its environment, the read-only paths Python and torch
need, the harness; and the two small records every part of the launcher shares."""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HARNESS = Path(__file__).resolve().parents[1] / "harness"  # the package, on the host
HARNESS_ROOT = "/opt/treino"  # under bubblewrap: the package at HARNESS_ROOT/harness, read-only, alone
HARNESS_PACKAGE = "harness"  # its name in the sandbox (``worker.harness`` on the trusted side)
TMPFS_BYTES = 64 * 1024 * 1024  # each of /job, /tmp, /dev/shm


class SandboxUnavailable(RuntimeError):
    """The configured sandbox or device cannot be used here; the message says why, in one line."""


@dataclass(frozen=True)
class Setup:
    """What this process runs learner code with."""

    isolation: Literal["bwrap", "process"]
    device: Literal["cpu", "cuda"]
    gpu: int | None = None  # the /dev/nvidiaN bound into bwrap sandboxes on CUDA


def harness_command(module: str, *args: str) -> list[str]:
    """How a sandbox starts the harness: ``python -B -E -s -m harness.<module> ARGS``, run with
    its working directory the folder that holds the package and nothing else (``HARNESS_ROOT``
    under bubblewrap, read-only; a fresh folder of the process-only sandbox's own).

    ``-m`` runs the module inside its package (its relative imports), so nothing inserts a
    folder into ``sys.path`` by hand. Why ``-E -s`` and not ``-I``: ``-I`` is ``-E -s -P``, and
    ``-P`` drops what ``-m`` puts first on ``sys.path``, the starting working directory, which
    is how Python finds the package. ``-E`` (no ``PYTHON*`` variable: no ``PYTHONPATH`` or
    ``PYTHONSTARTUP``) and ``-s`` (no user site-packages) stay. Python writes that entry as an
    absolute path, so the harness's later ``chdir`` into the learner's writable ``/job`` adds
    nothing: the trusted process's ``sys.path`` is that read-only folder, the standard library
    and the venv, and no folder the learner can write is ever on it (``-B``: no bytecode is
    written either). The learner's code gains nothing: it could read the harness before."""
    return [sys.executable, "-B", "-E", "-s", "-m", f"{HARNESS_PACKAGE}.{module}", *args]


def environment(home: str) -> dict[str, str]:
    """The whole environment of the sandbox, and of bwrap itself: nothing of the worker's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": f"{home}/tmp",
        "USER": "sandbox",  # getpass.getuser() without a passwd file
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def readonly_paths() -> list[str]:
    """What Python and torch need: the interpreter's prefix, the venv, the system libraries."""
    paths = []
    for prefix in (sys.base_prefix, sys.prefix):
        if prefix in ("/", "/usr"):  # a system Python: its stdlib is under /usr/lib
            paths += [p for p in executable_chain(sys.executable) if p not in paths]
        elif prefix not in paths:
            paths.append(prefix)
    paths += [
        p for p in ("/usr/lib", "/usr/lib64", "/usr/lib32") if os.path.isdir(p) and not os.path.islink(p)
    ]
    paths.append("/etc/ld.so.cache")
    return paths


def executable_chain(path: str) -> list[str]:
    """``path`` and each symbolic link it goes through to the real file, outside a venv: a venv
    of the system's Python starts through ``venv/bin/python3 -> /usr/bin/python3 -> python3.11``,
    and every hop must exist in the sandbox."""
    chain: list[str] = []
    while path not in chain:
        chain.append(path)
        if not os.path.islink(path):
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
    inside = sys.prefix + "/" if sys.prefix != sys.base_prefix else None  # the venv, bound whole
    return [p for p in chain if inside is None or not p.startswith(inside)]
