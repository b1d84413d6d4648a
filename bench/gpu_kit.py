"""The device machine's kit: what `make gpu-check` needs on a lent GPU machine, carried there.

That machine reaches no package registry and runs its own Python and torch (docs/gpu.md). The
kit is one folder, ``.kit/`` in the repository (git-ignored, carried with the working tree):

- ``bwrap/``: bubblewrap and the shared libraries it loads, from this machine's Debian packages
  (``apt-get download``, unpacked with ``dpkg -x`` here, never into /), the binary's RPATH set to
  ``$ORIGIN/../lib`` so that it runs from any folder with nothing set;
- ``wheels/``: every package the project runs on (the lock's versions) but torch and what only
  torch brings, for the target CPython (3.12 there), manylinux x86_64;
- ``manifest.json``: what it holds and for which Python.

    .venv/bin/python -m bench.gpu_kit build [--python 3.12]    # here: .kit/
    python3 -m bench.gpu_kit run [--out DIR] [-- ARGS]          # there: unpack, check, bench.gpu
    .venv/bin/python -m bench.gpu_kit rehearse                  # here, from a kit alone

``run`` touches nothing outside its prefix (``/tmp/treino-kit``): bubblewrap is copied there
(a sandbox's uid must reach it) and named by ``TREINO_BWRAP``; the wheels are installed there
with ``pip --target`` and put on ``PYTHONPATH``. It prints what the machine offers a sandbox
(one line each), grades one solution on the CPU through the kit's bubblewrap, then runs
``python -m bench.gpu`` (``make gpu-check`` without ``make install``, which needs PyPI).

``rehearse`` does all of it here, from the kit alone: a kit for this machine's Python, a clean
copy of the working tree as the device tool sends it, a venv holding only the system's Python
and torch from the local file (as the lent machine's), and the run in a mount namespace whose
``/usr/bin/bwrap`` is a tripwire, so nothing but the kit's bubblewrap can start a sandbox.

Standard library only (``build`` imports ``packaging``, which the project's venv has): ``run``
starts before anything is installed.
"""

import argparse
import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / ".kit"
PREFIX = Path("/tmp/treino-kit")
PACKAGES = ("bubblewrap", "libcap2", "libselinux1", "libpcre2-8-0")  # bwrap and what it loads
PATCHELF = "patchelf"  # used here only, to set bwrap's RPATH
LIBRARIES = ("libcap.so.2", "libselinux.so.1", "libpcre2-8.so.0")
DEVICE_PYTHON = "3.12"  # the lent machine's (docs/gpu.md, "Machine")
MANYLINUX = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64",
             "manylinux1_x86_64")  # fmt: skip
TRAVELS_BYTES = 64 * 1024**2  # the device tool's limit on the working tree with what it carries
KIT_BYTES = 40 * 1024**2  # the kit's share of it
SMOKE_EXERCISE = "gradient-accumulation/accumulate"
TRIPWIRE = "#!/bin/sh\necho 'gpu_kit: the system bwrap was started, not the kit' >&2\nexit 97\n"


def say(message: str) -> None:
    print(f"gpu-kit: {message}", file=sys.stderr, flush=True)


class KitError(RuntimeError):
    """A step of the kit failed; the message says which and why, in one line."""


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise KitError(f"{' '.join(map(str, argv[:3]))} … exited {done.returncode}: {' / '.join(tail)}")
    return done


# ---------------------------------------------------------------- here: the kit


def runtime_requirements(python: str) -> list[str]:
    """``name==version`` for every package the project runs on, as this venv has it (the
    lock's), with markers evaluated for CPython ``python`` on Linux x86_64; torch and what only
    torch brings are left out (the lent machine has its own)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
    }

    def needs(name: str, extras: set[str]) -> list[Requirement]:
        found = []
        for text in metadata.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in extras | {""}):
                found.append(req)
        return found

    wanted: dict[str, set[str]] = {}
    todo = [r for r in needs("treino", set()) if canonicalize_name(r.name) != "torch"]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in wanted and req.extras <= wanted[name]:
            continue
        wanted[name] = wanted.get(name, set()) | req.extras
        todo += needs(name, wanted[name])
    return [f"{name}=={metadata.version(name)}" for name in sorted(wanted)]


def download_wheels(requirements: list[str], python: str, into: Path) -> list[str]:
    """Binary wheels for CPython ``python`` (manylinux x86_64), one per requirement."""
    into.mkdir(parents=True, exist_ok=True)
    listed = into / "requirements.txt"
    listed.write_text("\n".join(requirements) + "\n")
    tags = [a for p in MANYLINUX for a in ("--platform", p)]
    _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
         "--abi", f"cp{python.replace('.', '')}", "--abi", "abi3", "--abi", "none", *tags,
         "-d", str(into), "-r", str(listed)],
    )  # fmt: skip
    listed.unlink()
    wheels = sorted(p.name for p in into.glob("*.whl"))
    if len(wheels) != len(requirements):
        raise KitError(f"{len(requirements)} requirements, {len(wheels)} wheels in {into}")
    return wheels


def fetch_debs(names: tuple[str, ...], into: Path) -> dict[str, Path]:
    """The current .deb of each package, from the machine's apt sources (their lists updated into
    a private folder when the machine has none); nothing installed."""
    into.mkdir(parents=True, exist_ok=True)
    into.chmod(0o777)  # apt's download user writes here
    try:
        _run(["apt-get", "download", *names], cwd=into)
    except KitError:
        lists = into / "lists"
        (lists / "partial").mkdir(parents=True, exist_ok=True)
        private = [f"-oDir::State::Lists={lists}", f"-oDir::Cache={into / 'cache'}"]
        _run(["apt-get", *private, "update", "-qq"])
        _run(["apt-get", *private, "download", *names], cwd=into)
    found = {}
    for name in names:
        [deb] = into.glob(f"{name}_*.deb")
        found[name] = deb
    return found


def deb_version(deb: Path) -> str:
    return _run(["dpkg-deb", "-f", str(deb), "Version"]).stdout.strip()


def build_bwrap(into: Path) -> dict[str, str]:
    """``into/bin/bwrap`` and ``into/lib/`` from this machine's Debian packages, the binary
    finding its libraries beside it (DT_RPATH ``$ORIGIN/../lib``, which also serves its
    libraries' own needs); the package versions."""
    with tempfile.TemporaryDirectory(prefix="treino-kit-debs-") as scratch:
        debs = fetch_debs((*PACKAGES, PATCHELF), Path(scratch) / "debs")
        staged = Path(scratch) / "root"
        for deb in debs.values():
            _run(["dpkg", "-x", str(deb), str(staged)])
        shutil.rmtree(into, ignore_errors=True)
        (into / "bin").mkdir(parents=True)
        (into / "lib").mkdir()
        shutil.copy2(staged / "usr/bin/bwrap", into / "bin/bwrap")
        for lib in LIBRARIES:
            [found] = [p for d in ("usr/lib", "lib") for p in (staged / d).glob(f"*/{lib}")]
            shutil.copy2(found.resolve(), into / "lib" / lib)  # the soname, the real file
        patchelf = staged / "usr/bin/patchelf"
        _run([str(patchelf), "--force-rpath", "--set-rpath", "$ORIGIN/../lib", str(into / "bin/bwrap")])
        versions = {name: deb_version(debs[name]) for name in PACKAGES}
    for path in into.rglob("*"):
        path.chmod(0o755)
    where = bwrap_libraries(into / "bin/bwrap")
    outside = {lib: path for lib, path in where.items() if not path.startswith(f"{into.resolve()}/lib/")}
    if outside:
        raise KitError(f"the kit's bwrap loads these from outside the kit: {outside}")
    return versions


def bwrap_libraries(binary: Path) -> dict[str, str]:
    """Where the dynamic loader finds each of ``LIBRARIES`` for ``binary`` (``ldd``)."""
    found = {}
    for line in _run(["ldd", str(binary)]).stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name in LIBRARIES:
            found[name] = os.path.realpath(rest.split(" (")[0])
    return found


def travelling(root: Path) -> list[Path]:
    """The files the device tool sends: tracked, and untracked but not ignored."""
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root).stdout
    return [root / name for name in listed.split("\0") if name and (root / name).is_file()]


def size_of(paths) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def build(kit: Path = KIT, python: str = DEVICE_PYTHON) -> dict:
    """The whole kit in ``kit`` (emptied first); its manifest."""
    started = time.monotonic()
    shutil.rmtree(kit, ignore_errors=True)
    kit.mkdir(parents=True)
    say(f"bubblewrap from Debian packages into {kit / 'bwrap'}")
    debs = build_bwrap(kit / "bwrap")
    requirements = runtime_requirements(python)
    say(f"{len(requirements)} wheels for CPython {python} into {kit / 'wheels'}")
    wheels = download_wheels(requirements, python, kit / "wheels")
    kit_bytes = size_of(kit.rglob("*"))
    tree_bytes = size_of(travelling(ROOT))
    manifest = {
        "python": python,
        "debs": debs,
        "wheels": wheels,
        "kit_bytes": kit_bytes,
        "tree_bytes": tree_bytes,
        "built_from": _run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT).stdout.strip(),
    }
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    say(
        f"kit {kit_bytes / 1024**2:.1f} MiB + working tree {tree_bytes / 1024**2:.1f} MiB = "
        f"{(kit_bytes + tree_bytes) / 1024**2:.1f} MiB of the {TRAVELS_BYTES // 1024**2} MiB that "
        f"travel ({time.monotonic() - started:.0f} s)"
    )
    if kit_bytes > KIT_BYTES or kit_bytes + tree_bytes > TRAVELS_BYTES:
        raise KitError(f"the kit is too large to travel ({kit_bytes} bytes)")
    return manifest


# ---------------------------------------------------------------- there: unpack and run


def reachable(path: Path) -> bool:
    """Whether another uid (a sandbox's) can walk down to ``path``."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [*reversed(path.parents), path])


def install(kit: Path, prefix: Path) -> dict[str, str]:
    """The kit unpacked under ``prefix`` (nothing else touched); the environment that uses it."""
    manifest = json.loads((kit / "manifest.json").read_text())
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != here:
        raise KitError(f"the kit is for CPython {manifest['python']}, this is {here} ({sys.executable})")
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.mkdir(parents=True)
    prefix.chmod(0o755)
    shutil.copytree(kit / "bwrap", prefix / "bwrap")
    bwrap = prefix / "bwrap/bin/bwrap"
    if not reachable(bwrap):
        raise KitError(f"{bwrap} is out of a sandbox uid's reach (a folder above it is not o+x)")
    site = prefix / "site"
    started = time.monotonic()
    _run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
         "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
         *sorted(str(w) for w in (kit / "wheels").glob("*.whl"))],
    )  # fmt: skip
    say(f"{len(manifest['wheels'])} wheels into {site} ({time.monotonic() - started:.1f} s); bwrap {bwrap}")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["TREINO_BWRAP"] = str(bwrap)
    env["TREINO_SANDBOX"] = "auto"  # no bubblewrap there: still every other row (its own says why)
    return env


PREFLIGHT = r"""
import ctypes, json, os, platform, shutil, subprocess, sys, warnings
from pathlib import Path
warnings.filterwarnings("ignore")  # torch without NumPy says so on import

def read(path):
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        return f"unreadable ({e.strerror})"

facts = {"python": f"{platform.python_version()} at {sys.executable}"}
try:
    import torch
    facts["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda}); GPU: {torch.cuda.is_available()}"
except ImportError as e:
    facts["torch"] = f"missing: {e}"
bwrap = os.environ["TREINO_BWRAP"]
done = subprocess.run([bwrap, "--version"], capture_output=True, text=True)
facts["bwrap"] = f"{bwrap}: {(done.stdout or done.stderr).strip()}"
userns = [read("/proc/sys/user/max_user_namespaces"), read("/proc/sys/kernel/unprivileged_userns_clone")]
facts["user namespaces"] = f"{userns[0]} at most; unprivileged_userns_clone {userns[1]}"
try:
    ctypes.CDLL("libseccomp.so.2")
    facts["libseccomp"] = "libseccomp.so.2 loads"
except OSError as e:
    facts["libseccomp"] = f"missing: {e} (no seccomp filter: bubblewrap sandboxes refused)"
facts["cgroup v2"] = read("/sys/fs/cgroup/cgroup.controllers")
facts["/dev/nvidia*"] = " ".join(sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))) or "none"
from worker import sandbox
facts["sandbox"] = sandbox.bwrap_problem() or "bubblewrap works (uid, namespaces, seccomp filter)"
for key, value in facts.items():
    print(f"  {key}: {value}")
"""


def preflight(env: dict[str, str]) -> None:
    """What this machine offers a sandbox, one line each (printed, never fatal)."""
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    say("the machine:\n" + (done.stdout + done.stderr).rstrip())


def smoke(env: dict[str, str]) -> bool:
    """One solution graded on the CPU in a bubblewrap sandbox (mandatory here): the kit's."""
    solution = ROOT / "lessons" / "02-gradient-accumulation" / "exercises" / "accumulate" / "solution.py"
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli", "check", SMOKE_EXERCISE, str(solution), "--json"],
        env={**env, "TREINO_SANDBOX": "bwrap", "TREINO_DEVICE": "cpu"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        verdict = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        say(f"CPU smoke: no verdict (exit {done.returncode}): {tail[0]}")
        return False
    metrics = verdict.get("metrics", {})
    passed = verdict["status"] == "passed" and metrics.get("isolation") == "bwrap"
    say(
        f"CPU smoke: `{SMOKE_EXERCISE}`'s solution {verdict['status']} in a {metrics.get('isolation')} "
        f"sandbox ({metrics.get('sandbox_ms')} ms in it) under {env['TREINO_BWRAP']}"
    )
    return passed


def run(kit: Path, prefix: Path, out: Path, bench_args: list[str]) -> int:
    """Unpack, say what the machine offers, the CPU smoke, then ``bench.gpu`` (its exit status)."""
    started = time.monotonic()
    env = install(kit, prefix)
    preflight(env)
    smoked = smoke(env)
    out.mkdir(parents=True, exist_ok=True)
    say(f"python -m bench.gpu {' '.join(bench_args)} ({time.monotonic() - started:.0f} s in)")
    with open(out / "gpu-check.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.gpu", "--output", str(out / "gpu.md"), *bench_args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    say(f"bench.gpu exited {code}; the kit took {time.monotonic() - started:.0f} s")
    return code or (0 if smoked else 1)


# ---------------------------------------------------------------- here: the rehearsal


def torch_venv(where: Path, torch: str) -> Path:
    """A venv of the system's Python holding torch alone (and what torch needs), as the lent
    machine's; made once, kept for the next rehearsal."""
    python = where / "bin" / "python"
    has = (
        python.exists()
        and subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
    )
    if has:
        return python
    shutil.rmtree(where, ignore_errors=True)
    _run(["/usr/bin/python3", "-m", "venv", str(where)])
    say(f"{where}: the system's Python and {torch} (a minute or two)")
    _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", torch])
    return python


def rehearse(work: Path, torch: str) -> int:
    """The run as on the lent machine, here, from a kit alone (see the module's doc)."""
    work.mkdir(parents=True, exist_ok=True)
    python = torch_venv(work / "torch-venv", torch)
    version = "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"
    here = _run([str(python), "-c", version])
    tree = work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    for path in travelling(ROOT):
        target = tree / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    build(tree / ".kit", here.stdout.strip())
    tripwire = work / "tripwire"
    tripwire.write_text(TRIPWIRE)
    tripwire.chmod(0o755)
    hide = f"mount --bind {tripwire} /usr/bin/bwrap" if Path("/usr/bin/bwrap").exists() else "true"
    say(f"run, in a mount namespace where /usr/bin/bwrap is a tripwire ({hide})")
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f'{hide} && exec "$0" -m bench.gpu_kit run --prefix "$1" --out "$2"',
         str(python), str(work / "prefix"), str(work / "out")],
        cwd=tree,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"},
    )  # fmt: skip
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_kit", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    made = verbs.add_parser("build", help="here: the kit, into .kit/")
    made.add_argument("--python", default=DEVICE_PYTHON, help=f"the target CPython (default {DEVICE_PYTHON})")
    made.add_argument("--kit", type=Path, default=KIT)
    ran = verbs.add_parser("run", help="there: unpack the kit, check the machine, run bench.gpu")
    ran.add_argument("--kit", type=Path, default=KIT)
    ran.add_argument("--prefix", type=Path, default=PREFIX)
    ran.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or ROOT / "var" / "gpu-kit"),
        help="where gpu.md and gpu-check.log go (default: $OUT, the device tool's)",
    )
    ran.add_argument("bench_args", nargs="*", help="for bench.gpu, after --")
    told = verbs.add_parser("rehearse", help="here: the run, from a kit alone")
    told.add_argument("--work", type=Path, default=Path("/tmp/treino-rehearsal"))
    told.add_argument("--torch", default="torch==2.13.0", help="what the torch venv installs")
    args = parser.parse_args(argv)
    try:
        if args.verb == "build":
            build(args.kit, args.python)
            return 0
        if args.verb == "run":
            return run(args.kit, args.prefix, args.out, args.bench_args)
        return rehearse(args.work, args.torch)
    except KitError as exc:
        say(f"stopped: {exc}")
        return 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
