"""Trusted measurement (worker/harness/supervise.py): the supervisor reads the shared parameters
itself, keeps the meters' peaks from their counts, ends everything the child started, and the
checks refuse a report that disagrees with what was observed. Each supervisor runs in a fresh
interpreter of its own (it makes itself a subreaper and kills its descendants: never pytest's).
"""

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from worker.checks import Interfered, accumulation, checkpointing, observed, phases, pipeline
from worker.harness import scenarios

HARNESS = Path(__file__).resolve().parents[2] / "worker" / "harness"


def supervised(body: str, alone: bool = False) -> dict:
    """Run ``body`` (defines ``part(link)``, returning the report's bytes) in a child of a
    supervisor in a fresh interpreter; its observations, the report and how the child ended."""
    script = f"""
import json, os, sys, time
sys.path.insert(0, {str(HARNESS)!r})
import quiet
quiet.silence()
import torch
import supervise
supervise.harden()
weights = torch.zeros(3, dtype=torch.float64)
shared = supervise.Shared([weights])
{body}
supervisor = supervise.Supervisor(shared, 1 << 20, items=globals().get("items"), alone={alone})
report, death = supervisor.run(part)
seen = supervisor.observer.result(shared.snapshot())
seen["items"] = supervisor.items.result() if supervisor.items else None
print(json.dumps({{"observed": seen, "report": report, "death": death}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


REPORT = 'json.dumps({"t": "report", "data": {}, "error": None, "output": "", "dropped": 0}).encode()'


def test_the_supervisor_reads_what_the_child_computed_in_shared_memory():
    out = supervised(f"""
def part(link):
    for step in range(3):
        weights.add_(1.0)  # the child's optimizer step, in place
        link.sync("step", step, snapshot=True)
    weights.mul_(10)
    return {REPORT}
""")
    seen = out["observed"]
    assert seen["snapshots"] == [[1.0] * 3, [2.0] * 3, [3.0] * 3]
    assert seen["final_params"] == [30.0] * 3  # read with the child dead
    assert seen["counts"] == {"step": 3} and out["death"] is None


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


# ---------------------------------------------------------------- the checks


def accumulation_data(steps, final, peak=0):
    """The reported half of an accumulation trace with the observed half as the supervisor
    writes it: three steps, each snapshot the parameters after it."""
    seen = {
        "mode": "fork",
        "counts": {"step": 3},
        "events": [["step", t, 0.0, t] for t in range(3)],
        "events_dropped": 0,
        "snapshots": [[0.1 * t] * 4 for t in range(1, 4)],
        "final_params": [0.3] * 4,
        "meters": [{"peak": 100, "packed": 1000, "freed": 900, "messages": 5}],
        "interfered": None,
    }
    return {
        "steps_total": len(steps),
        "steps": [{"params": p} for p in steps],
        "final_params": final,
        "peak_saved_bytes": peak,
        "observed": seen,
    }


def test_accumulation_refuses_a_report_that_differs_from_the_observations():
    honest = [[0.1 * t] * 4 for t in range(1, 4)]
    assert accumulation.observations(accumulation_data(honest, [0.3] * 4, 100))[1] == 3
    with pytest.raises(Interfered, match="parameters"):
        accumulation.observations(accumulation_data([[0.0] * 4] * 3, [0.3] * 4, 100))
    with pytest.raises(Interfered, match="reported memory"):  # the meter reset before the report
        accumulation.observations(accumulation_data(honest, [0.3] * 4, 0))
    with pytest.raises(Interfered, match="steps"):
        accumulation.observations(accumulation_data(honest[:2], [0.3] * 4, 100))
    with pytest.raises(Interfered, match="no observations"):
        accumulation.observations({**accumulation_data(honest, [0.3] * 4, 100), "observed": None})


def test_checkpointing_refuses_a_gradient_that_is_not_the_step_observed():
    params = {"lr": 0.5}
    before, after = [1.0, 2.0], [0.5, 2.5]  # the step: -lr * (1, -1)
    seen = {
        "counts": {"call": 1},
        "events": [["call", 0, 0.0, 0]],
        "events_dropped": 0,
        "snapshots": [before],
        "final_params": after,
        "interfered": None,
        "meters": [{"peak": 64, "packed": 64, "freed": 0, "messages": 1}],
    }
    data = {"peaks": [64], "final_params": after, "steps": [{"grad": [1.0, -1.0]}], "observed": seen}
    checkpointing._observations(params, data)
    with pytest.raises(Interfered, match="gradients"):
        checkpointing._observations(params, {**data, "steps": [{"grad": [0.0, 0.0]}]})
    with pytest.raises(Interfered, match="reported memory"):
        checkpointing._observations(params, {**data, "peaks": [0]})


def test_find_the_bottleneck_counts_and_slow_phases_are_the_supervisors():
    params = {"slow": ["data", "backward"]}
    points = {"data": [[0, 1]] * 6, **{p: [[0, 1]] * 2 for p in ("forward", "backward", "optimizer")}}
    seen = {
        "events": [[label, 0, 0.0, -1] for label in ["fetch"] * 2 + ["forward", "backward", "step"] * 2],
        "events_dropped": 0,
        "interfered": None,
        "slowed": ["backward", "fetch"],
    }
    with pytest.raises(Interfered, match="reported events"):  # two fetches served, six reported
        phases._observed(params, {"runs": [{"points": points}], "observed": seen})
    honest = {**points, "data": [[0, 1]] * 2}
    runs = phases._observed(params, {"runs": [{"points": honest}], "observed": seen})
    assert runs[0]["slow"] == "backward"  # the phase the supervisor drew for run 0, not the child's
    with pytest.raises(Interfered, match="slow phases"):
        phases._observed(params, {"runs": [{"points": honest}], "observed": {**seen, "slowed": []}})


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


PIPELINE = {"samples": 10, "batch_size": 4, "min_speedup": 1.3}


def pipeline_start():
    torch.manual_seed(0)
    return scenarios.pipeline_model().to(torch.float64).parameters()


def pipeline_data(batches, ends, ms=(1000.0, 500.0, 400.0, 450.0)):
    """A pipeline trace whose baseline and three attempts started from the model's seeded
    parameters and, by the supervisor's reading, ended on ``ends`` (one vector per run)."""
    start = torch.cat([p.detach().reshape(-1) for p in pipeline_start()]).tolist()
    events, snapshots, clock = [], [], 0.0
    for k, end in enumerate(ends):
        events.append(["run", k, clock, len(snapshots)])
        snapshots.append(start)
        clock += ms[k]
        events.append(["done", k, clock, len(snapshots)])
        snapshots.append(end)
    seen = {
        "events": events,
        "events_dropped": 0,
        "snapshots": snapshots,
        "interfered": None,
        "items": {"seeds": ["11", "12", "13", "14"], "served": [10] * 4},
    }
    return {"attempts": 3, "loader": {"type": "DataLoader"}, "batches": batches, "observed": seen}


def test_the_input_pipeline_is_judged_on_the_parameters_and_times_the_supervisor_observed():
    start = torch.cat([p.detach().reshape(-1) for p in pipeline_start()]).tolist()
    right = pipeline.expected_batches(PIPELINE)
    ends = [pipeline.trained(PIPELINE, start, seed).tolist() for seed in (11, 12, 13, 14)]
    result = pipeline.evaluate(PIPELINE, pipeline_data(right, ends), "cpu")
    assert result.passed
    assert result.metrics["speedup"] == 2.5  # 1000 ms against the fastest attempt's 400
    # the right indices reported, but the parameters moved by other items (another run's)
    replayed = pipeline_data(right, ends[:2] + [ends[1], ends[1]])
    check = pipeline.evaluate(PIPELINE, replayed, "cpu").checks[0]
    assert (check.passed, check.message) == (False, "check.batches.altered")
    regrouped = [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    with pytest.raises(Interfered, match="batches"):  # right parameters, other batches reported
        pipeline.evaluate(PIPELINE, pipeline_data(regrouped, ends), "cpu")
    extra = pipeline_data(right, ends)
    extra["observed"]["events"].insert(2, ["run", 1, 999.0, 1])  # a run opened again by hand
    with pytest.raises(Interfered, match="runs"):
        pipeline.evaluate(PIPELINE, extra, "cpu")


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
sys.path.insert(0, {str(HARNESS)!r})
import quiet
quiet.silence()
import supervise
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
