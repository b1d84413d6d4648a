"""The hostile-program suite: each program runs in every sandbox this machine has, through
the real grading path, started the ways the worker starts it (``start``): as a fork of a template
(fork, worker/forkserver.py), and, under bwrap, from a warm pool of single-use sandboxes (exec);
torch is imported off the clock. An attack on what runs the same once the job has started is run
once per sandbox kind instead, started as the worker starts jobs (``ANY_START``, below, says why).

The launcher's environment holds secrets while a module of this folder runs (its runners are
the module's own, started with them); the tests prove they never reach the sandbox. After every
test no sandbox process or temp dir may be left behind.
"""

import dataclasses
import os
import re
import socket
import time
from pathlib import Path

import pytest

from worker.harness import quiet  # noqa: E402

with quiet.ignored():
    import torch  # noqa: F401

from app.config import ROOT, get_settings  # noqa: E402
from app.lessons.course import load_course  # noqa: E402
from contracts.verdict import render  # noqa: E402
from worker import forkserver, pool, sandbox  # noqa: E402
from worker.grading import Grader  # noqa: E402

SECRET = "sk-treino-test-secret-4d1f"
DB_SECRET = "db-content-7c2e-never-inside"
MODES = ("bwrap", "process")
# (sandbox kind, start) for an attack on where the two starts differ (ANY_START, below, says
# what does). The worker forks bwrap's jobs where a template can make a job's namespaces, and
# execs single-use sandboxes where it cannot (forkserver.runner); it always forks the process-only
# sandbox's (forkserver.problem), whose exec start is only `treino check`'s cold one: that is
# tested in test_launcher.py, and would cost a cold interpreter importing torch per attack here.
PAIRS = (("bwrap", "exec"), ("bwrap", "fork"), ("process", "fork"))


@dataclasses.dataclass
class Outcome:
    verdict: dict
    seconds: float  # submission to verdict, including any wait for a sandbox to warm up

    @property
    def status(self) -> str:
        return self.verdict["status"]

    @property
    def job_seconds(self) -> float:
        """Hand-off to the end of the sandbox: what the job's limits bound."""
        return self.verdict["metrics"].get("sandbox_ms", 0) / 1000

    @property
    def text(self) -> str:
        """Everything the learner gets to see."""
        return repr(self.verdict)


@pytest.fixture(scope="module")
def secrets_in_launcher(tmp_path_factory):
    """Secrets in the launcher's environment and a database file it points at, for one module:
    set for the whole session, they reached every later test on the same xdist worker (a browser
    test's reset link was signed with this TREINO_SECRET_KEY while its server kept the default)."""
    db = tmp_path_factory.mktemp("db") / "treino.db"
    db.write_text(DB_SECRET)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TREINO_SECRET_KEY", SECRET)
        mp.setenv("TREINO_DATABASE_URL", f"sqlite:///{db}")
        mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        yield db


class Pools(dict):
    """One runner per (sandbox kind, start), started when a test first needs it: a warm pool of
    single-use sandboxes, or a fork server."""

    def __missing__(self, key):
        mode, start = key
        self[key] = (
            pool.Pool(2, start=lambda: sandbox.Sandbox(mode, "cpu"))
            if start == "exec"
            else forkserver.ForkServer(mode, "cpu")
        )
        return self[key]


@pytest.fixture(scope="module")
def pools(secrets_in_launcher):
    started = Pools()
    yield started
    for p in started.values():
        p.close()


@pytest.fixture(scope="session")
def has_cgroups() -> bool:
    cg = sandbox.Cgroup.create(f"treino-probe-{os.getpid()}")
    if cg is not None:
        cg.destroy()
    return cg is not None


@pytest.fixture(scope="session")
def exercise():
    course = load_course(get_settings().lessons_dir)
    found = course.exercise("gradient-accumulation/accumulate")
    assert found is not None
    return found


def pytest_generate_tests(metafunc):
    """A test taking ``mode`` and ``start`` runs under each of PAIRS, unless it names its start
    itself (``ANY_START``); one taking ``mode`` alone, under each kind (MODES)."""
    if "mode" not in metafunc.fixturenames:
        return
    named = ANY_START.mark in metafunc.definition.iter_markers("parametrize")
    if "start" in metafunc.fixturenames and not named:
        metafunc.parametrize(("mode", "start"), PAIRS, indirect=True, ids=[f"{m}-{s}" for m, s in PAIRS])
    else:
        metafunc.parametrize("mode", MODES, indirect=True)


@pytest.fixture
def mode(request):
    if request.param == "bwrap" and sandbox.bwrap_problem() is not None:
        pytest.skip(f"bwrap unavailable here: {sandbox.bwrap_problem()}")
    return request.param


@pytest.fixture
def start(request, mode):
    if request.param == "any":  # ANY_START: the worker's own start where it can fork, else exec
        return "fork" if forkserver.problem(mode) is None else "exec"
    if request.param == "fork" and (why := forkserver.problem(mode)) is not None:
        pytest.skip(f"jobs cannot be forked here: {why}")
    return request.param


# Where the two starts differ: what each builds around the job (bwrap's namespaces, mounts,
# /proc and filter for exec; the template's own for fork: worker/harness/template.py), its uid,
# limits and cgroup, the descriptors it hands over (the trace, the done pipe), how its end is
# seen and how it is killed. An attack on any of these runs under both (PAIRS). Once the job has
# started, both run the same code (run.run_job: the harness, its supervisor and the child it
# forks, with the child's filter) and the same judging in the worker: an attack on that alone
# (Python objects, modules or the link inside the job, the checks) would only repeat one code
# path under exec, so it runs once per sandbox kind, started as the worker starts jobs (a fork
# where this host can fork; exec where it cannot):
ANY_START = pytest.mark.parametrize("start", ["any"], indirect=True)


def _markers() -> dict[int, str]:
    """Sandbox processes on this machine: pid -> cmdline (a template's jobs carry its own)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if re.search(r" -m harness\.(run|template) .* (cpu|cuda) [0-9a-f]{12}", cmd):
                found[int(entry)] = cmd
    return found


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parent = int(Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            found.setdefault(parent, []).append(int(name))
    return found


def template_pids(fs) -> list[int]:
    """The template's own processes, its Python last (under bwrap: bwrap's two, then it)."""
    template = fs._current()
    assert template.ready(sandbox.WARM_UP_SECONDS)
    chain = [template.proc.pid]
    for _ in range(2 if template.isolation == "bwrap" else 0):
        [child] = _children()[chain[-1]]
        chain.append(child)
    return chain


def fork_strays(fs) -> dict[int, str]:
    """Processes of the template's jobs still there: anything carrying its command line but its
    own processes and the sandbox forked ahead for the next job (the fork, A, and the next
    job's init, B: one and two levels under the template, B with no child yet)."""
    own = template_pids(fs)
    children = _children()
    ahead = children.get(own[-1], [])
    inits = [b for a in ahead for b in children.get(a, [])]
    if len(ahead) == 1 and len(inits) <= 1 and not any(children.get(b) for b in inits):
        own += ahead + inits
    marker = fs._current().id
    return {pid: cmd for pid, cmd in _markers().items() if marker in cmd and pid not in own}


@pytest.fixture
def run(mode, start, pools, exercise, monkeypatch):
    """``run(code, **limits) -> Outcome`` in this test's sandbox; then nothing may be left."""
    runner = pools[(mode, start)]
    grader = Grader(sandbox.Setup(mode, "cpu"), runner)
    taken: list[str] = []
    roots: list[Path] = []  # the process-only sandbox's host temp dirs
    original = runner.take if start == "exec" else runner._take

    def take(*args):
        box = original(*args)
        taken.append(box.id)
        if box._root is not None:
            roots.append(box._root)
        return box

    monkeypatch.setattr(runner, "take" if start == "exec" else "_take", take)

    def go(code: str | bytes, **limits) -> Outcome:
        ex = exercise
        if limits:
            ex = dataclasses.replace(ex, limits=dataclasses.replace(ex.limits, **limits))
        code = code.encode() if isinstance(code, str) else code
        started = time.monotonic()
        verdict = render(grader.grade(ex, code), "en")
        return Outcome(verdict, time.monotonic() - started)

    yield go
    sandbox.reap_all()  # the verdict comes before the dead tree is reaped
    deadline = time.monotonic() + 60  # a loaded machine reaps a fork bomb slowly
    while True:
        if start == "exec":
            strays = {p: c for p, c in _markers().items() if any(i in c for i in taken)}
        else:
            strays = fork_strays(runner)
        if not strays or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not strays, f"processes left behind: {strays}"
    left = [root for root in roots if os.path.lexists(root)]
    assert not left, f"temp dirs left behind: {left}"


def host_paths():
    """Files a learner would like to read."""
    course = load_course(get_settings().lessons_dir)
    folder = Path(course.exercise("gradient-accumulation/accumulate").path)
    mistakes = sorted((folder / "mistakes").glob("*.py"))
    return {"solution": folder / "solution.py", "mistake": mistakes[0], "repo": ROOT, "var": ROOT / "var"}


def listener() -> socket.socket:
    """A service on the host's loopback, as PostgreSQL and Redis are."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s
