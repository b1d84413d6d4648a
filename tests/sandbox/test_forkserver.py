"""Jobs forked from a template (worker/forkserver.py): each is as isolated from the next job, from
the template and from the host as a single-use sandbox, and a failing template costs no job.

Hostile programs run through ``ForkServer.run`` (the learner's prints come back in the trace's
``output``); the template's own processes are known, so anything else under it after a job is a
leftover. The main hostile suite also runs through the fork path (tests/sandbox/conftest.py).
"""

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from app.config import get_settings
from app.lessons.course import load_course
from tests.sandbox.conftest import fork_strays, template_pids
from worker import forkserver, sandbox
from worker.harness import quiet

with quiet.ignored():
    import torch  # noqa: F401  (the launcher imports torch too: the same process as a worker)

pytestmark = pytest.mark.slow  # a real template imports torch once (seconds), then jobs are forks

LIMITS = sandbox.Limits(wall_seconds=20, cpu_seconds=20, memory_mb=1024)
MARK = "4f2a"  # in names the jobs below give their processes and segments


def _available() -> str | None:
    return sandbox.bwrap_problem() or forkserver.problem("bwrap")


@pytest.fixture(scope="module")
def server():
    if (why := _available()) is not None:
        pytest.skip(f"no bwrap fork server here: {why}")
    fs = forkserver.ForkServer("bwrap", "cpu")
    yield fs
    fs.close()
    sandbox.reap_all()


EXERCISE = load_course(get_settings().lessons_dir).exercise("gradient-accumulation/accumulate")


def run(fs, code: str, limits: sandbox.Limits = LIMITS) -> str:
    """The job's output (its prints, from the trace), or the result if there is no trace; the
    program's ``train(*args)`` is called as the accumulate exercise's."""
    job = {"entry": EXERCISE.entry, "params": EXERCISE.check_params, "device": "cpu"}
    result = fs.run(EXERCISE.check_kind, job, code.encode(), limits)
    if result.trace is None:
        return f"no trace: {result}"
    return result.trace["output"]


def template_pid(fs) -> int:
    return template_pids(fs)[-1]


def job_processes(fs, timeout: float = 30) -> dict[int, str]:
    """Whatever of its jobs still runs once they are over (waited for: a killed tree takes a
    moment to go)."""
    deadline = time.monotonic() + timeout
    while (strays := fork_strays(fs)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return strays


def host_comms() -> dict[int, str]:
    """pid -> comm of the host's processes (one that ends while read is left out)."""
    names = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                names[int(name)] = Path(f"/proc/{name}/comm").read_text().strip()
            except OSError:
                continue
    return names


# ---------------------------------------------------------------- the job's own sandbox


def test_a_job_has_the_single_use_sandboxs_guarantees(server):
    output = run(
        server,
        """
import os, socket
STATUS = ("Seccomp:", "NoNewPrivs", "CapEff", "CapBnd")
def writable(path):
    try:
        os.close(os.open(path, os.O_WRONLY))
        return True
    except OSError:
        return False
def train(*args):
    print("map", *open("/proc/self/uid_map").read().split(), "end")
    print([l.strip() for l in open("/proc/self/status") if l.startswith(STATUS)])
    print("interfaces", socket.if_nameindex())
    print("sysctl writable", sum(writable(os.path.join(d, f)) for d, _, fs in os.walk("/proc/sys")
                                 for f in fs))
    try:
        print("keys", open("/proc/keys").read())
    except OSError as e:
        print("keys hidden", e.strerror)  # as under bwrap: /dev/null on a nodev mount
    print("userns max", open("/proc/sys/user/max_user_namespaces").read().strip())
""",
    )
    inside, outside, count = output.split("map ", 1)[1].split(" end")[0].split()
    assert outside != "0" and count == "1", output
    if os.geteuid() == 0:
        assert int(outside) in sandbox.SANDBOX_UIDS and inside == outside
    for line in (
        "'Seccomp:\\t2'",
        "'NoNewPrivs:\\t1'",
        "'CapEff:\\t0000000000000000'",
        "'CapBnd:\\t0000000000000000'",
        "interfaces [(1, 'lo')]",
        "sysctl writable 0",
        "keys hidden Permission denied",
        "userns max 0",
    ):
        assert line in output, output


def test_a_job_cannot_see_signal_trace_or_read_another_job_or_the_template(server):
    victim_done: list[str] = []
    victim = threading.Thread(
        target=lambda: victim_done.append(
            run(
                server,
                f"""
import ctypes, time
def train(*args):
    ctypes.CDLL(None).prctl(15, b"victim-{MARK}", 0, 0, 0)
    time.sleep(6)
    print("survived")
""",
            )
        )
    )
    victim.start()
    deadline = time.monotonic() + 30
    while f"victim-{MARK}" not in host_comms().values() and time.monotonic() < deadline:
        time.sleep(0.05)
    host_pids = [pid for pid, comm in host_comms().items() if comm == f"victim-{MARK}"]
    assert host_pids, "the victim job did not start"
    targets = [*host_pids, template_pid(server)]
    output = run(
        server,
        f"""
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def train(*args):
    comms = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            comms.append(open(f"/proc/{{p}}/comm").read().strip())
    print("comms", comms)
    for pid in {targets!r}:
        try:
            os.kill(pid, signal.SIGKILL)
            print("DONE kill", pid)
        except OSError as e:
            print("refused kill", pid, e.strerror)
    for pid in {targets!r} + [1]:  # 1: its own init, which holds the job's status pipe
        try:
            open(f"/proc/{{pid}}/mem", "r+b").close()
            print("DONE mem", pid)
        except OSError as e:
            print("refused mem", pid, e.strerror)
        print("ptrace", pid, libc.ptrace(16, pid, 0, 0), errno.errorcode.get(ctypes.get_errno()))
""",
    )
    victim.join(30)
    assert victim_done and "survived" in victim_done[0], victim_done
    assert f"victim-{MARK}" not in output and "DONE" not in output, output
    assert "ptrace 1 -1 EPERM" in output  # its own init: the filter; the others are not there
    assert "refused mem 1 Permission denied" in output  # its init is not dumpable


def test_a_job_cannot_outlive_itself_into_the_next(server):
    run(
        server,
        f"""
import ctypes, os, threading, time
def linger():
    ctypes.CDLL(None).prctl(15, b"linger-{MARK}", 0, 0, 0)
    time.sleep(600)
def train(*args):
    threading.Thread(target=linger).start()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            linger()
        os._exit(0)
""",
    )
    assert job_processes(server) == {}
    assert f"linger-{MARK}" not in host_comms().values()
    output = run(server, "import os\ndef train(*args):\n    print(sorted(os.listdir('/proc')))\n")
    assert f"linger-{MARK}" not in output


def test_a_job_cannot_change_the_template(server):
    first = run(
        server,
        f"""
import json, os, sys, torch
def train(*args):
    torch.allclose = lambda *a, **k: True
    json.planted = True
    sys.modules["planted_{MARK}"] = object()
    for where in ("/job", "/tmp", "/dev/shm"):
        open(f"{{where}}/planted-{MARK}", "w").write("x")
    for path in ("/opt/treino/harness/run.py", "/proc/1/mem"):
        try:
            open(path, "r+b").write(b"x")
            print("WROTE", path)
        except OSError as e:
            print("refused", path, e.strerror)
""",
    )
    # both writes refused, each time the kind calls train (accumulate: its maths run, its memory run)
    lines = first.splitlines()
    assert len(lines) >= 2 and all(line.startswith("refused ") for line in lines), first
    second = run(
        server,
        f"""
import json, os, sys, torch
def train(*args):
    print("allclose", torch.allclose(torch.zeros(1), torch.ones(1)))
    print("json", hasattr(json, "planted"), "module", "planted_{MARK}" in sys.modules)
    print("files", [f for d in ("/job", "/tmp", "/dev/shm") for f in os.listdir(d) if "{MARK}" in f])
""",
    )
    assert "allclose False" in second and "json False module False" in second, second
    assert "files []" in second, second


def test_a_job_leaves_no_key_or_segment_behind(server):
    first = run(
        server,
        f"""
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
def train(*args):
    key = 0x{MARK}
    print("shm", libc.shmget(key, 4096, 0o1600), "sem", libc.semget(key, 1, 0o1600),
          "msg", libc.msgget(key, 0o1600))
    fd = os.open("/dev/shm/posix-{MARK}", os.O_CREAT | os.O_RDWR)
    os.write(fd, b"x")
    print("key", libc.syscall(248, b"user", b"planted-{MARK}", b"secret", 6, -3),
          errno.errorcode.get(ctypes.get_errno()))
""",
    )
    assert "shm -1" not in first and "key -1 EPERM" in first, first
    second = run(
        server,
        f"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def train(*args):
    for what in ("shm", "sem", "msg"):
        print(what, len(open(f"/proc/sysvipc/{{what}}").read().splitlines()))
    print("posix", os.listdir("/dev/shm"))
    print("found", libc.syscall(249, b"user", b"planted-{MARK}", None, 0))
""",
    )
    for what in ("shm", "sem", "msg"):
        assert f"{what} 1" in second.splitlines(), second  # the header only
    assert "posix []" in second and "found -1" in second, second
    key = str(0x4F2A)
    for what in ("shm", "sem", "msg"):  # nor on the host (each job has an IPC namespace)
        assert all(
            line.split()[0] != key for line in Path(f"/proc/sysvipc/{what}").read_text().splitlines()[1:]
        )


# ---------------------------------------------------------------- a template that fails


@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_a_template_that_dies_takes_its_jobs_along_and_loses_none(isolation):
    if isolation == "bwrap" and (why := _available()) is not None:
        pytest.skip(f"no bwrap fork server here: {why}")
    fs = forkserver.ForkServer(isolation, "cpu")
    killer = threading.Thread(target=lambda: _kill_template_once_running(fs))
    try:
        template_pid(fs)
        killer.start()
        output = run(
            fs,
            f"""
import ctypes, time
def train(*args):
    ctypes.CDLL(None).prctl(15, b"doomed-{MARK}", 0, 0, 0)
    time.sleep(3)
    print("graded")
""",
        )
        killer.join()
        assert "graded" in output  # run again in a cold single-use sandbox
        sandbox.reap_all()  # (that one too is gone)
        assert f"doomed-{MARK}" not in host_comms().values()  # the forked one died with its template
        assert "graded" in run(fs, "def train(*args):\n    print('graded')\n")
        assert fs.warm() == 1  # a new template
    finally:
        fs.close()
        sandbox.reap_all()


def _kill_template_once_running(fs) -> None:
    deadline = time.monotonic() + 60
    while f"doomed-{MARK}" not in host_comms().values() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(template_pid(fs), 9)


class Mute:
    """A template that says it is warm and then forks nothing."""

    def __init__(self) -> None:
        self.id, self.isolation, self.device = "mute", "bwrap", "cpu"
        self.closed = False

    def ready(self, timeout: float = 0) -> bool:
        return True

    def alive(self) -> bool:
        return not self.closed

    def fork(self, fds: list[int]) -> None:
        pass

    def tail(self) -> str:
        return ""

    def close(self) -> None:
        self.closed = True


def test_a_template_that_does_not_answer_costs_no_job(monkeypatch):
    if (why := _available()) is not None:
        pytest.skip(f"no bwrap here: {why}")
    monkeypatch.setattr(forkserver, "FORK_SECONDS", 0.5)
    started: list[Mute] = []
    fs = forkserver.ForkServer("bwrap", "cpu", start=lambda: started.append(Mute()) or started[-1])
    try:
        output = run(fs, "def train(*args):\n    print('graded')\n")
    finally:
        fs.close()
        sandbox.reap_all()
    assert "graded" in output  # the cold single-use sandbox ran it
    assert started[0].closed and len(started) >= 2  # the mute one was replaced


# ---------------------------------------------------------------- without bubblewrap


def test_the_process_only_sandbox_forks_too():
    """No namespaces there (not isolated, as its single-use sandbox), but the same protocol:
    a job's own work directory, its pid from its credentials, nothing left afterwards."""
    fs = forkserver.ForkServer("process", "cpu")
    try:
        output = run(
            fs,
            "import os\ndef train(*args):\n    open('tmp/x', 'w').write('x')\n"
            "    print('cwd', os.getcwd())\n",
        )
        assert f"cwd {tempfile.gettempdir()}/treino-job-" in output, output
        assert job_processes(fs) == {}
    finally:
        fs.close()
        sandbox.reap_all()
    cwd = output.split("cwd ", 1)[1].split()[0]
    assert not os.path.exists(cwd)
