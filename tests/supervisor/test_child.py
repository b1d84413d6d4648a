"""The supervisor and its child, standard library only (worker/harness/supervise.py): the
meters' peaks kept from their counts, how a child that did not report ended, the protocol's
refusals, the sweep, the child's descriptors and filter, the items served, and the supervisor
out of the child's reach. The parameters it reads and the checks: tests/worker/test_supervise.py."""

import errno
import os
import subprocess
import sys
import time

import pytest

from tests.supervisor.conftest import REPORT, ROOT, supervised
from worker.checks import Interfered, observed


def test_the_meter_peak_is_the_supervisors_and_counts_may_not_go_back():
    out = supervised(f"""
def part(link):
    link.meter(0, 100, 0)
    link.meter(0, 300, 100)  # 200 live: the peak
    link.meter(0, 350, 300)
    link.meter(0, 10, 0)  # reset: the counts went backwards
    return {REPORT}
""")
    meter = out["observed"]["meters"][0]
    assert meter["peak"] == 200
    assert out["observed"]["interfered"] == [
        {
            "key": "meter_backwards",
            "values": {"meter": 0, "packed": 10, "freed": 0, "packed_before": 350, "freed_before": 300},
        }
    ]
    with pytest.raises(Interfered):
        observed({"observed": out["observed"]})


def test_a_child_that_dies_without_reporting_is_named_by_how_it_died():
    out = supervised("""
def part(link):
    os._exit(3)
""")
    assert out["report"] is None and out["death"] == ["exit", 3]
    out = supervised("""
import signal
def part(link):
    os.kill(os.getpid(), signal.SIGXCPU)
""")
    assert out["death"] == ["signal", 24]


def test_a_report_that_is_not_strict_json_is_interference():
    out = supervised("""
def part(link):
    return b'{"t": "report", "data": NaN}'
""")
    assert out["report"] is None
    assert out["observed"]["interfered"] == [
        {"key": "protocol", "values": {"message": "not-strict-json", "error": "ValueError"}}
    ]


def test_everything_the_child_started_is_ended_before_the_trace():
    out = supervised("""
def part(link):
    read, write = os.pipe()
    if os.fork() == 0:  # a daemonised grandchild that would outlive the loop
        os.setsid()
        if os.fork() == 0:
            os.write(write, str(os.getpid()).encode())
            time.sleep(60)
        os._exit(0)
    grandchild = int(os.read(read, 32))
    return json.dumps({"t": "report", "data": {"grandchild": grandchild}, "error": None,
                       "output": "", "dropped": 0}).encode()
""")
    pid = out["report"]["data"]["grandchild"]
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")


def test_the_child_keeps_no_descriptor_but_its_link():
    out = supervised("""
def part(link):
    extra = os.open("/dev/null", os.O_RDONLY)  # one the supervisor had at the fork, in effect
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    return json.dumps({"t": "report", "data": {"fds": fds, "link": link._sock.fileno(),
                                               "extra": extra},
                       "error": None, "output": "", "dropped": 0}).encode()
""")
    data = out["report"]["data"]
    others = {fd for fd in data["fds"] if fd > 2} - {data["link"], data["extra"]}
    assert len(others) <= 1, data  # at most the descriptor listdir itself held while reading


ITEMS = """
import socket, struct, threading
items = supervise.Items(8, 0.3, lambda seed, i: struct.pack("!qI", seed % 2**62, i), 12)

def ask(index):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(items.address)
    sock.sendall(struct.pack("!I", index))
    answer = b""
    while len(answer) < 13:
        answer += sock.recv(13 - len(answer))
    sock.close()
    return [answer[0], *struct.unpack("!qI", answer[1:])]

def part(link):
    out = {"before": ask(0)}  # no run open yet: no seed to make it from
    link.sync("run", 0)
    answers, started = [None] * 8, time.monotonic()
    def one(i):
        answers[i] = ask(i)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["eight_at_once_s"] = time.monotonic() - started
    out["run0"] = answers
    out["past_the_end"] = ask(8)
    link.sync("run", 1)
    out["run1"] = ask(3)
    return json.dumps({"t": "report", "data": out, "error": None, "output": "", "dropped": 0}).encode()
"""


def test_the_supervisor_serves_the_items_each_after_its_wait_many_at_once_new_each_run():
    out = supervised(ITEMS)
    data, items = out["report"]["data"], out["observed"]["items"]
    assert data["before"][0] == 1 and data["past_the_end"][0] == 1  # refused: no run; no item 8
    seed0, seed1 = (int(s) % 2**62 for s in items["seeds"])
    assert seed0 != seed1  # drawn in the supervisor at each run, after the fork
    assert data["run0"] == [[0, seed0, i] for i in range(8)]
    assert data["run1"] == [0, seed1, 3]
    assert items["served"] == [8, 1]  # items served per run; refused questions are not items
    # eight questions at once are answered together: one wait (0.3 s), not eight (2.4 s)
    assert 0.3 <= data["eight_at_once_s"] < 1.2, data


ALONE = """
import subprocess, threading
def part(link):
    out = {}
    try:
        threading.Thread(target=lambda: None).start()
        out["thread"] = "started"
    except RuntimeError as exc:
        out["thread"] = str(exc)
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except OSError as exc:
        out["fork"] = exc.errno
    try:
        out["spawn"] = subprocess.run(["/bin/true"]).returncode
    except OSError as exc:
        out["spawn"] = exc.errno
    return json.dumps({"t": "report", "data": out, "error": None, "output": "", "dropped": 0}).encode()
"""


@pytest.mark.parametrize("alone", [False, True])
def test_a_child_alone_can_start_no_thread_and_no_process(alone):
    """The memory kinds' child: their meters see one thread of one process, so no work may run
    on another thread or in another process (a backward on another thread passed)."""
    data = supervised(ALONE, alone=alone)["report"]["data"]
    if alone:
        assert data == {"thread": "can't start new thread", "fork": errno.EPERM, "spawn": errno.EPERM}
    else:
        assert data == {"thread": "started", "fork": 7, "spawn": 0}


def test_the_child_cannot_stop_renice_trace_or_interrupt_its_supervisor():
    """Issue 27: each of these was allowed (same uid, same PID namespace); SIGINT made
    KeyboardInterrupt escape the supervision. Now the supervisor ignores what it can and the
    child's filter refuses the rest with EPERM; its own signals still reach it."""
    out = supervised("""
import ctypes, resource, signal
def traced(ret):
    if ret != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
def part(link):
    boss = os.getppid()
    tried = {}
    libc = ctypes.CDLL(None, use_errno=True)
    for name, call in (
        ("sigint", lambda: os.kill(boss, signal.SIGINT)),
        ("sigterm", lambda: os.kill(boss, signal.SIGTERM)),
        ("sigstop", lambda: os.kill(boss, signal.SIGSTOP)),
        ("group-sigstop", lambda: os.killpg(os.getpgid(boss), signal.SIGSTOP)),
        ("renice", lambda: os.setpriority(os.PRIO_PROCESS, boss, 19)),
        ("renice-user", lambda: os.setpriority(os.PRIO_USER, 0, 19)),
        ("rlimit", lambda: resource.prlimit(boss, resource.RLIMIT_CPU, (1, 1))),
        ("ptrace", lambda: traced(libc.ptrace(16, boss, 0, 0))),
        ("own-renice", lambda: os.setpriority(os.PRIO_PROCESS, 0, 1)),
    ):
        try:
            call()
            tried[name] = "done"
        except OSError as exc:
            tried[name] = exc.errno
    time.sleep(0.2)  # a signal that got through would have ended or stopped the supervisor
    return json.dumps({"t": "report", "data": tried, "error": None, "output": "", "dropped": 0}).encode()
""")
    tried = out["report"]["data"]
    refused = {"sigstop", "group-sigstop", "renice", "renice-user", "rlimit", "ptrace"}
    assert {name for name, how in tried.items() if how == 1} == refused, tried  # EPERM
    assert tried["sigint"] == tried["sigterm"] == tried["own-renice"] == "done", tried
    assert out["death"] is None


def test_an_exception_of_the_supervisor_still_kills_and_sweeps_the_child():
    """Kill and sweep run in ``finally``: KeyboardInterrupt (or any exception) escaping the
    serving loop used to leave the child running beside the trace being written."""
    script = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from worker.harness import quiet
quiet.silence()
from worker.harness import supervise
supervise.harden()
supervisor = supervise.Supervisor(None, 1 << 20)
def serve(sock, pid):
    with open("/tmp/treino-test-child-{{}}".format(os.getpid()), "w") as f:
        f.write(str(pid))
    raise KeyboardInterrupt
supervisor._serve = serve
def part(link):
    time.sleep(30)
try:
    supervisor.run(part)
except KeyboardInterrupt:
    pid = int(open("/tmp/treino-test-child-{{}}".format(os.getpid())).read())
    os.unlink("/tmp/treino-test-child-{{}}".format(os.getpid()))
    print("gone" if not os.path.exists(f"/proc/{{pid}}") else "alive")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "gone", done.stderr
