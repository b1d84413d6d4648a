"""Issue 27, two ways around the supervisor an audit found, each tried as a learner would:

- **A signal by descriptor ownership.** The child made a descriptor's owner its supervisor
  (``F_SETOWN``), its signal SIGSTOP (``F_SETSIG``) and set ``O_ASYNC``: the next I/O on it had
  the kernel stop the supervisor, which no filter on ``kill`` sees. The supervisor stayed stopped
  until the wall limit, and the verdict blamed the learner's loop for a timeout. Now the child's
  filter refuses these (EPERM); the descriptor calls Python and torch make keep working.
- **The trace's descriptors through /proc.** With the process-only sandbox run by a worker that
  is not root, the child has the worker's uid: it could open ``/proc/<worker>/fd/N`` (the trace
  memory file, the "done" pipe) of its own job and of the warm sandboxes beside it, and plant a
  trace. Now every process that holds a job's trace (the worker, a warm sandbox, a template and
  its forks) is not dumpable, and the worker trusts a trace only once its harness said "D".
"""

import ctypes
import errno
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.config import get_settings
from app.lessons.course import load_course
from contracts.limits import Limits
from contracts.verdict import render
from tests.sandbox.conftest import ANY_START, DB_SECRET, SECRET
from tests.sandbox.test_forging import CONCATENATED
from worker import sandbox
from worker.grading import Grader

ROOT = Path(__file__).resolve().parents[2]
EPERM = 1

CLEAN_LOOP = """
def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

# every way of making a descriptor signal another process, each printed as "<route> <errno>"
# ("done" where it went through), then I/O on the descriptors; the supervisor is the target
OWN = """
import fcntl, os, signal, socket, struct, time

F_SETSIG, F_SETOWN_EX, F_OWNER_PID = 10, 15, 0
FIOSETOWN, SIOCSPGRP, FIOASYNC = 0x8901, 0x8902, 0x5452

def make_it_signal(boss):
    read, write = os.pipe()
    left, right = socket.socketpair()
    routes = (
        ("F_SETOWN", lambda: fcntl.fcntl(read, fcntl.F_SETOWN, boss)),
        ("F_SETOWN_EX", lambda: fcntl.fcntl(read, F_SETOWN_EX, struct.pack("ii", F_OWNER_PID, boss))),
        ("FIOSETOWN", lambda: fcntl.ioctl(left, FIOSETOWN, struct.pack("i", boss))),
        ("SIOCSPGRP", lambda: fcntl.ioctl(left, SIOCSPGRP, struct.pack("i", boss))),
        ("F_SETSIG", lambda: fcntl.fcntl(read, F_SETSIG, signal.SIGSTOP)),
        ("F_SETSIG-socket", lambda: fcntl.fcntl(left, F_SETSIG, signal.SIGSTOP)),
        ("O_ASYNC", lambda: fcntl.fcntl(read, fcntl.F_SETFL, fcntl.fcntl(read, fcntl.F_GETFL) | os.O_ASYNC)),
        ("FIOASYNC", lambda: fcntl.ioctl(left, FIOASYNC, struct.pack("i", 1))),
    )
    for name, call in routes:
        try:
            call()
            print(name, "done")
        except OSError as exc:
            print(name, exc.errno)
    os.write(write, b"x")  # I/O: a SIGSTOP to the owner, had it been set
    right.send(b"x")
    time.sleep(0.2)
"""


def _routes(output: str) -> dict[str, str]:
    return {
        line.split()[0]: line.split()[1]
        for line in output.splitlines()
        if line.split()[:1] and line.split()[0].startswith(("F_", "FIO", "SIOC", "O_"))
    }


ROUTES = (
    "F_SETOWN",
    "F_SETOWN_EX",
    "FIOSETOWN",
    "SIOCSPGRP",
    "F_SETSIG",
    "F_SETSIG-socket",
    "O_ASYNC",
    "FIOASYNC",
)


@pytest.mark.slow  # real torch
def test_the_child_cannot_have_a_descriptor_signal_its_supervisor():
    """The supervisor alone, in a fresh interpreter (as tests/worker/test_supervise.py runs it):
    every route is refused with EPERM, the supervisor is not stopped (it answers the child's
    sync after the I/O and returns its report), and the descriptor calls honest code makes
    (flags, close-on-exec, duplicates, locks, a byte count) still work in the child."""
    script = f"""
import contextlib, io, json, os, sys
sys.path.insert(0, {str(ROOT)!r})
from worker.harness import quiet
quiet.silence()
from worker.harness import supervise
supervise.harden()
{OWN}
def honest():
    import fcntl, tempfile
    read, write = os.pipe()
    os.set_blocking(read, False)  # F_GETFL, F_SETFL O_NONBLOCK
    assert not os.get_blocking(read)
    os.set_inheritable(write, True)  # F_GETFD, F_SETFD
    copy = fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 10)
    os.write(copy, b"abc")
    ready = fcntl.ioctl(read, 0x541B, b"\\0\\0\\0\\0")  # FIONREAD
    assert int.from_bytes(ready, sys.byteorder) == 3
    with tempfile.TemporaryFile() as f:
        fcntl.lockf(f, fcntl.LOCK_EX)  # F_SETLKW
    assert fcntl.fcntl(read, fcntl.F_GETOWN) == 0
    return "ok"

def part(link):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        make_it_signal(os.getppid())
    link.sync("after")  # answered only by a supervisor that is not stopped
    data = {{"routes": out.getvalue(), "honest": honest()}}
    return json.dumps({{"t": "report", "data": data, "error": None, "output": "", "dropped": 0}}).encode()

supervisor = supervise.Supervisor(None, 1 << 20)
report, death = supervisor.run(part)
print(json.dumps({{"report": report, "death": death, "counts": supervisor.observer.counts}}))
"""
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:  # killed (SIGKILL): a stopped supervisor ignores the rest
        pytest.fail("the supervisor did not return: the child stopped it")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["death"] is None and out["counts"] == {"after": 1}, out
    data = out["report"]["data"]
    assert _routes(data["routes"]) == dict.fromkeys(ROUTES, str(EPERM)), data["routes"]
    assert data["honest"] == "ok"


@pytest.mark.slow  # real sandboxes, real torch
@ANY_START  # the child's filter, made by its supervisor: the same code under both starts
def test_a_loop_that_tries_it_is_graded_at_normal_speed(run, mode):
    """Through the real grading path (both sandboxes, both starts): the loop tries every route
    against its supervisor, then trains correctly. Before, the supervisor was stopped and the
    verdict was "timeout" at the wall limit; now each route is refused, the run is judged on
    what it did (it passes), at normal speed, and the correct loop graded next passes too."""
    code = OWN + CLEAN_LOOP.replace(
        "    optimizer.zero_grad()\n", "    make_it_signal(os.getppid())\n    optimizer.zero_grad()\n", 1
    )
    outcome = run(code, wall_seconds=30)
    assert outcome.job_seconds < 15, outcome.verdict  # not held to the wall limit
    assert _routes(outcome.verdict["output"]) == dict.fromkeys(ROUTES, str(EPERM)), outcome.verdict
    assert outcome.status == "passed", outcome.verdict
    assert SECRET not in outcome.text and DB_SECRET not in outcome.text
    after = run(CLEAN_LOOP)
    assert after.status == "passed", after.verdict


@pytest.mark.slow  # real sandboxes, real torch
@ANY_START  # the child's filter, made by its supervisor: the same code under both starts
def test_a_refused_call_left_uncaught_is_the_learners_error(run, mode):
    """A plain program that does not catch the refusal gets the usual error verdict, naming its
    line: no "interfered", no "timeout"."""
    code = "import fcntl, os, signal\n" + CLEAN_LOOP.replace(
        "    optimizer.zero_grad()\n",
        "    fcntl.fcntl(0, 10, signal.SIGSTOP)\n    optimizer.zero_grad()\n",
        1,
    )
    outcome = run(code, wall_seconds=30)
    assert outcome.status == "error" and outcome.job_seconds < 15, outcome.verdict
    [check] = outcome.verdict["checks"]
    assert "PermissionError" in check["message"] and "fcntl.fcntl(0, 10" in check["message"], check
    assert outcome.verdict["diagnosis"] is None


# ---------------------------------------------------------------- the completion record


def _job(trace: bytes | None, said: bytes | None, code: str = "pass"):
    """A job's memory files as a harness leaves them (``trace``, then ``said`` on its done
    pipe, each only if given) and a process that ends by running ``code``; its end and result
    as the worker reads them."""
    trace_fd = os.memfd_create("treino-trace", os.MFD_CLOEXEC)
    output_fd = os.memfd_create("treino-output", os.MFD_CLOEXEC)
    done_read, done_write = os.pipe2(os.O_CLOEXEC)
    try:
        if trace is not None:
            os.write(trace_fd, trace)
        if said is not None:
            os.write(done_write, said)
        proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[done_write])
        os.close(done_write)  # the process's copy is the pipe's last writer
        end = sandbox.wait_for_end(proc.pid, done_read, 20, 0, None, False, False)
        result = sandbox.result(sandbox.Ending(end, 10, proc.wait(), output_fd, trace_fd), Limits())
        return end, result
    finally:
        for fd in (trace_fd, output_fd, done_read):
            os.close(fd)


TRACE = json.dumps(
    {"version": 1, "kind": "accumulation", "outcome": "ok", "error": None, "data": {}, "output": "",
     "output_dropped": 0, "timings": {}}
).encode()  # fmt: skip


def test_a_trace_is_read_only_after_its_harness_said_it_was_done():
    end, result = _job(TRACE, b"D")
    assert end == "done" and result.status == "ok" and result.trace is not None
    # the D comes before the end, as the harness writes it; the trace is complete
    end, result = _job(TRACE, b"D", "import time; time.sleep(0.3)")
    assert end == "done" and result.status == "ok"


@pytest.mark.parametrize("said", [None, b"x"])
def test_a_trace_without_the_harness_s_done_is_a_failure_of_ours(said):
    """A trace in the memory file, but no "D" after it (the harness died writing it, or
    something else wrote it): never read. The learner is told the grader failed, not that
    their program did."""
    end, result = _job(TRACE, said)
    assert end == "exited", end
    assert (result.status, result.trace, result.reason) == ("crashed", None, sandbox.INCOMPLETE_TRACE)

    class Ran:
        def run(self, *args, **kwargs):
            return result

    exercise = load_course(get_settings().lessons_dir).exercise("gradient-accumulation/accumulate")
    assert exercise is not None
    verdict = render(
        Grader(sandbox.Setup("process", "cpu"), Ran()).grade(exercise, CLEAN_LOOP.encode()), "en"
    )
    assert verdict["status"] == "error", verdict
    [check] = verdict["checks"]
    assert "not your fault" in check["message"] and "unfinished" in check["message"], check


def test_no_trace_and_no_done_is_still_how_the_job_ended():
    """Without a trace, the end is the job's as before: a CPU limit is named as one."""
    end, result = _job(None, None, "import os, signal; os.kill(os.getpid(), signal.SIGXCPU)")
    assert (end, result.status, result.reason) == ("exited", "crashed", "cpu")
    end, result = _job(b'{"partial', None, "import os, signal; os.kill(os.getpid(), signal.SIGXCPU)")
    assert (end, result.status, result.reason) == ("exited", "crashed", "cpu")  # a limit, not ours


# ---------------------------------------------------------------- the trace's descriptors

# test_forging's wrong loop (the activations of every micro-batch alive at once: it fails the
# memory check on its own), run as the learner's train
WRONG = (
    CONCATENATED
    + """
import os, time

def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
"""
)

# the wrong loop, then a passing trace captured from a clean run written into every trace
# memory file and "D" into every pipe of every process of the worker's (its ancestors up to
# the worker, and the worker's other descendants: warm sandboxes, a template's jobs), and each
# one's memory opened for writing; each attempt printed
TAMPER = (
    WRONG
    + """
CAPTURED = {captured!r}
MARK = {mark!r}

def parent_of(pid):
    with open(f"/proc/{{pid}}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])

def worker_tree():
    chain, pid = [], os.getppid()
    while pid > 1:
        chain.append(pid)
        with open(f"/proc/{{pid}}/cmdline", "rb") as f:
            if MARK in f.read():
                break
        pid = parent_of(pid)
    else:
        return chain  # no worker of the test's above: touch nothing else
    worker, others = chain[-1], []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in chain and int(entry) != os.getpid():
            up = int(entry)
            try:
                for _ in range(8):
                    up = parent_of(up)
                    if up == worker:
                        others.append(int(entry))
                        break
            except (OSError, ValueError, IndexError):
                pass
    return chain + others

def tamper():
    for pid in worker_tree():
        refused = 0
        try:
            fds = os.listdir(f"/proc/{{pid}}/fd")
        except OSError:
            fds, refused = [], 1
        for fd in fds:
            path = f"/proc/{{pid}}/fd/{{fd}}"
            try:
                target = os.readlink(path)
            except OSError:
                refused += 1
                continue
            try:
                if "treino-trace" in target:
                    with open(path, "r+b") as f:
                        f.truncate(0)
                        f.write(CAPTURED.encode())
                    print("wrote-trace", pid, fd)
                elif target.startswith("pipe:"):
                    handle = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    os.write(handle, b"D")
                    os.close(handle)
                    print("wrote-pipe", pid, fd)
            except OSError:
                pass
        if refused:
            print("fd-refused", pid)
        try:
            open(f"/proc/{{pid}}/mem", "r+b").close()
            print("mem-open", pid)
        except OSError:
            print("mem-refused", pid)

def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
    tamper()
    time.sleep(2)  # for a worker that read "D" to take the planted trace
"""
)

# the worker, as an operator runs it: not root (or, when the suite runs as root, with no capability), grading
# with the process-only sandbox started one way (argv: start, the three programs, the mark that
# names the worker to the tamperer, the file it writes each verdict into as a line of JSON)
WORKER = """
import dataclasses, json, logging, sys
logging.disable(logging.CRITICAL)
from worker.harness import quiet
with quiet.ignored():
    import torch
from app.config import get_settings
from app.lessons.course import load_course
from contracts.verdict import render
from worker import forkserver, grading, pool, sandbox

start, clean, tamper, wrong, mark, verdicts = sys.argv[1:7]
exercise = load_course(get_settings().lessons_dir).exercise("gradient-accumulation/accumulate")
exercise = dataclasses.replace(exercise, limits=dataclasses.replace(exercise.limits, code_kb=512))
runner = (
    pool.Pool(2, start=lambda: sandbox.Sandbox("process", "cpu"))
    if start == "exec"
    else forkserver.ForkServer("process", "cpu")
)
seen = {}
real = grading._judge
def spy(exercise, trace, *args):
    seen["trace"] = trace
    return real(exercise, trace, *args)
grading._judge = spy

def grade(code):
    verdict = render(grader.grade(exercise, code.encode()), "en")
    with open(verdicts, "a") as f:  # not stdout: a pipe, which the tamperer writes "D" into
        f.write(json.dumps(verdict) + "\\n")

with grading.Grader(sandbox.Setup("process", "cpu"), runner) as grader:
    grade(clean)
    grade(tamper.format(captured=json.dumps(seen["trace"]), mark=mark.encode()))
    grade(wrong)  # the next learner, in a sandbox the tamperer could see warm
"""
MARK = "treino-test-worker-27"


def _without_capabilities():
    """Between fork and exec: no capability now or after the exec (the bounding set too). A
    root worker so made stands to its jobs as a worker that is not root does: same uid, no
    capability they lack, so only its being dumpable or not decides what of it they reach."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) < 0 and ctypes.get_errno() == errno.EINVAL:  # PR_CAPBSET_DROP
            break
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if libc.capset(ctypes.c_char_p(header), ctypes.create_string_buffer(24)) != 0:
        raise OSError(ctypes.get_errno(), "capset")


@pytest.fixture
def workdir():
    """A folder the test's worker can write in, whoever it runs as."""
    path = tempfile.mkdtemp(prefix="treino-test-27-", dir="/tmp")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow  # real sandboxes, real torch
@pytest.mark.parametrize("start", ("exec", "fork"))
def test_a_worker_that_is_not_root_keeps_its_traces_out_of_the_jobs_reach(start, workdir):
    """Its job's trace memory file, its "done" pipe and those of the sandboxes kept warm beside
    it (a warm sandbox's, a template's job forked ahead) cannot be opened through /proc by the
    job, nor any of their memory: the job gets its own verdict (the memory check fails) and so
    does the next one. Before, a job of a worker that is not root wrote a captured passing trace
    and "D" into its worker's descriptors, and passed."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONPATH": str(ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TREINO_DATABASE_URL": f"sqlite:///{workdir}/treino.db",
    }
    as_operator = {} if os.geteuid() != 0 else {"preexec_fn": _without_capabilities}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, start, CLEAN_LOOP, TAMPER, WRONG, MARK, f"{workdir}/verdicts"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(ROOT),
        **as_operator,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(f"{workdir}/verdicts") as f:
        clean, tampered, after = (json.loads(line) for line in f)
    assert clean["status"] == "passed", clean
    for verdict in (tampered, after):  # each judged on what it did: the memory check fails
        assert verdict["status"] == "failed", verdict
        memory = next(c for c in verdict["checks"] if c["name"] == "Activation memory")
        assert memory["status"] == "failed", verdict
    output = tampered["output"]
    # Not asserted: a sandbox beside it that is still starting, between its exec and run.py's
    # first step (not_dumpable), can be reached (its memory; its descriptors, but it holds no
    # trace file or done pipe then: they are made at hand-off, tests/sandbox/test_handoff.py);
    # its memory is in reach there (issue 27, open).
    tried = {line.split()[1] for line in output.splitlines() if line.startswith("fd-refused")}
    assert len(tried) >= 2, tampered  # its supervisor and the worker, at least (see below)
    assert "mem-refused" in output, tampered
