"""The device machine's kit (bench/gpu_kit.py): what it carries, and that a sandbox starts from its
bubblewrap alone, the system's hidden. The whole rehearsal (`python -m bench.gpu_kit rehearse`:
a venv of the system's Python with torch, the wheels, `bench.gpu`) is documented in docs/gpu.md."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.config import ROOT
from bench import gpu_kit
from worker.sandbox import host

ROOT_ONLY = pytest.mark.skipif(
    os.getuid() != 0, reason="a private mount namespace over /usr/bin/bwrap needs root"
)


def test_the_kit_carries_what_the_project_runs_on_but_torch():
    wanted = gpu_kit.runtime_requirements("3.12")
    names = {line.split("==")[0] for line in wanted}
    # the project's own, what FastAPI needs (the last GPU run lacked opentelemetry-api), the bindings
    assert {
        "fastapi",
        "opentelemetry-api",
        "pydantic-core",
        "sqlalchemy",
        "nvidia-ml-py",
        "argon2-cffi",
    } <= names
    assert "torch" not in names and not names & {"sympy", "networkx", "filelock", "fsspec"}  # torch's alone
    assert not names & {"pytest", "mypy", "ruff", "playwright"}  # the test tools stay here
    from importlib import metadata

    assert all(
        line == f"{name}=={metadata.version(name)}" for line, name in zip(wanted, sorted(names), strict=True)
    )


def test_a_kit_for_another_python_is_refused_before_anything_is_unpacked(tmp_path):
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "manifest.json").write_text(json.dumps({"python": "2.7", "wheels": []}))
    with pytest.raises(gpu_kit.KitError, match=r"the kit is for CPython 2\.7, this is 3\."):
        gpu_kit.install(tmp_path / "kit", tmp_path / "prefix")
    assert not (tmp_path / "prefix").exists()


def test_reachable_means_every_folder_above_lets_others_through(tmp_path):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    for folder in (tmp_path, tmp_path / "a", inner):
        folder.chmod(0o755)
    assert gpu_kit.reachable(inner) == all(os.stat(p).st_mode & 0o001 for p in tmp_path.parents)
    (tmp_path / "a").chmod(0o700)
    assert not gpu_kit.reachable(inner)


def test_a_venv_of_the_systems_python_has_every_link_to_its_interpreter_in_the_sandbox(tmp_path, monkeypatch):
    """The rehearsal found it: venv/bin/python -> python3 -> /usr/bin/python3 -> python3.11, and
    only the last was bound, so bwrap could not start the venv's python."""
    system, venv = tmp_path / "usr" / "bin", tmp_path / "venv" / "bin"
    system.mkdir(parents=True)
    venv.mkdir(parents=True)
    (system / "python3.11").write_text("")
    (system / "python3").symlink_to("python3.11")
    (venv / "python3").symlink_to(system / "python3")
    (venv / "python").symlink_to("python3")
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setattr(sys, "prefix", str(venv.parent))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    paths = host.readonly_paths()
    assert paths[:3] == [str(system / "python3"), str(system / "python3.11"), str(venv.parent)]


TRIED = r"""
import json, subprocess, sys
from worker import sandbox
system = subprocess.run(["bwrap", "--version"], capture_output=True, text=True)
done = sandbox.run_isolated([sys.executable, "-I", "-S", "-c", "print(open('/proc/self/status').read())"], 60)
status = dict(line.split(":", 1) for line in done.stdout.decode().splitlines() if ":" in line)
print(json.dumps({"system": [system.returncode, system.stderr], "problem": sandbox.bwrap_problem(),
                  "bwrap": sandbox.BWRAP, "returncode": done.returncode,
                  "seccomp": status.get("Seccomp", "").strip(), "uid": status.get("Uid", "").split()}))
"""


def _in_repo(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # Debian's mirror, then real torch grading in the kit's bubblewrap
@ROOT_ONLY
def test_a_sandbox_starts_from_the_kits_bubblewrap_with_the_systems_hidden():
    """bwrap from Debian's packages, unpacked into a folder, finding its libraries there; then,
    in a mount namespace whose /usr/bin/bwrap is a tripwire, the start-up probe, a job's view
    (the filter in force, a uid that is not root) and a solution graded on the CPU."""
    work = Path(tempfile.mkdtemp(prefix="treino-kit-test-"))
    work.chmod(0o755)  # a sandbox's uid starts the binary
    try:
        gpu_kit.build_bwrap(work / "bwrap")
        binary = work / "bwrap" / "bin" / "bwrap"
        where = gpu_kit.bwrap_libraries(binary)
        assert sorted(where) == sorted(gpu_kit.LIBRARIES)
        assert all(path.startswith(f"{work}/bwrap/lib/") for path in where.values()), where
        tripwire = work / "tripwire"
        tripwire.write_text(gpu_kit.TRIPWIRE)
        tripwire.chmod(0o755)
        env = {**os.environ, "TREINO_BWRAP": str(binary)}
        hidden = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  f'mount --bind {tripwire} /usr/bin/bwrap && exec "$@"', "sh"]  # fmt: skip
        done = _in_repo([*hidden, sys.executable, "-c", TRIED], env)
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.splitlines()[-1])
        assert seen["system"][0] == 97 and "the system bwrap was started" in seen["system"][1]
        assert seen["problem"] is None and seen["bwrap"] == str(binary)
        assert seen["returncode"] == 0 and seen["seccomp"] == "2"
        assert seen["uid"] and "0" not in seen["uid"], seen
        solution = ROOT / "lessons/02-gradient-accumulation/exercises/accumulate/solution.py"
        check = ["-m", "worker.cli", "check", gpu_kit.SMOKE_EXERCISE, str(solution), "--json"]
        graded = _in_repo(
            [*hidden, sys.executable, *check], {**env, "TREINO_SANDBOX": "bwrap", "TREINO_DEVICE": "cpu"}
        )
        verdict = json.loads(graded.stdout)
        assert (verdict["status"], verdict["metrics"]["isolation"]) == ("passed", "bwrap"), graded.stderr
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
