"""A report shorter than asked, and a check's own logic (issue 41, classes 1 and 4): each program
below is a wrong loop that passed before, with no forged parameter and no fake trace. Either its
report was cut short (find-the-bottleneck judged "all 0 loops"; the other kinds' lists emptied the
same way), or the check never compared what it was given with what the exercise asked
(train-an-adapter's rank) or whether anything trained (an adapter that cannot move agrees with
Adam's replay of it). None may pass, under both starts (tests/sandbox/conftest.py, PAIRS), and
each exercise's own solution still passes beside them.
"""

import pytest

from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch

# The child's report rewritten as data just before it leaves for the supervisor: through the
# harness's link module's ``send`` (found by name, whatever package the harness lives in), or
# through a profile hook that sees the harness's ``learner()`` return its data.
ON_THE_LINK = """
import json, sys

def rewrite_report(change):
    link = next(m for k, m in list(sys.modules.items()) if k == "link" or k.endswith(".link"))
    send = link.send
    def rewritten(sock, payload):
        message = json.loads(payload)
        if message.get("t") == "report" and isinstance(message.get("data"), dict):
            change(message["data"])
            payload = json.dumps(message).encode()
        return send(sock, payload)
    link.send = rewritten
"""

ON_RETURN = """
import sys

def rewrite_report(change):
    def hook(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "learner" and isinstance(arg, tuple):
            if isinstance(arg[0], dict):
                change(arg[0])
    sys.setprofile(hook)
"""


def _not_passed(outcome) -> None:
    assert outcome.status in ("failed", "error"), outcome.verdict
    for check in outcome.verdict["checks"]:
        # the vacuous pass the issue found said this
        assert "all 0 loops" not in check["message"], outcome.verdict


# find-the-bottleneck: four loops asked for, one per slow phase
NOTHING_TRAINED = """
def find_bottleneck(model, loader, loss_fn, optimizer):
    return "data"
"""

GUESSED = """
from torch.profiler import record_function

def find_bottleneck(model, loader, loss_fn, optimizer):
    batches = iter(loader)
    for _ in range(len(loader)):
        with record_function("data"):
            x, y = next(batches)
        with record_function("forward"):
            loss = loss_fn(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
    return "data"  # a guess: right on one loop in four
"""

# only the loops where the guess happened to be right are kept in the report
KEEP_THE_LUCKY = """
def lucky(data):
    def slowest(run):
        totals = {}
        for name, start, end in run["ranges"]:
            totals[name] = totals.get(name, 0.0) + end - start
        return max(totals, key=totals.get) if totals else None
    data["runs"][:] = [run for run in data["runs"] if run["answer"] == slowest(run)]

rewrite_report(lucky)
"""

EMPTIED = "\nrewrite_report(lambda d: d['runs'].clear())\n"
CUT_TO_ONE = "\nrewrite_report(lambda d: d['runs'].__delitem__(slice(1, None)))\n"
PHASES_ROUTES = {
    "runs-emptied-on-the-link": ON_THE_LINK + NOTHING_TRAINED + EMPTIED,
    "runs-emptied-on-return": ON_RETURN + NOTHING_TRAINED + EMPTIED,
    "only-the-lucky-loops-on-the-link": ON_THE_LINK + GUESSED + KEEP_THE_LUCKY,
    "only-the-lucky-loops-on-return": ON_RETURN + GUESSED + KEEP_THE_LUCKY,
    "runs-cut-to-the-first": ON_THE_LINK + GUESSED + CUT_TO_ONE,
}


# no record_function at all: the phases measured with a clock of its own, and a range per event
# written into the report, around each one's reported times (it passed while the labels were
# judged on the reported ranges; now they are the ranges the supervisor saw open and close)
UNLABELLED_BUT_REPORTED = """
import time

def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
    batches = iter(loader)
    for _ in range(len(loader)):
        t = time.perf_counter()
        x, y = next(batches)
        spent["data"] += time.perf_counter() - t
        t = time.perf_counter()
        loss = loss_fn(model(x), y)
        spent["forward"] += time.perf_counter() - t
        t = time.perf_counter()
        loss.backward()
        spent["backward"] += time.perf_counter() - t
        t = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        spent["optimizer"] += time.perf_counter() - t
    return max(spent, key=spent.get)

def labelled(data):
    for run in data["runs"]:
        run["ranges"] = [[phase, a - 0.001, b + 0.001] for phase, spans in run["points"].items()
                         for a, b in spans]

rewrite_report(labelled)
"""


class TestFindTheBottleneck:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("bottleneck/find-the-bottleneck")

    @pytest.mark.parametrize("route", PHASES_ROUTES)
    def test_a_short_report_does_not_pass(self, run, mode, route):
        """'On all 0 loops you named the slow phase ()' was a pass: the runs reported are now
        held to the loops the exercise asked for, as the grader counted them."""
        outcome = run(PHASES_ROUTES[route], wall_seconds=30)
        assert outcome.status == "error", outcome.verdict
        message = outcome.verdict["checks"][0]["message"]
        assert "this run cannot be judged" in message and "where the grader counted 4" in message, message

    @pytest.mark.parametrize("hook", ["on-the-link", "on-return"])
    def test_ranges_written_into_the_report_label_nothing(self, run, mode, hook):
        outcome = run((ON_THE_LINK if hook == "on-the-link" else ON_RETURN) + UNLABELLED_BUT_REPORTED)
        assert outcome.status == "failed", outcome.verdict
        labels = next(c for c in outcome.verdict["checks"] if c["name"] == "Phase labels")
        assert labels["status"] == "failed" and "Only 0 of 6" in labels["message"], outcome.verdict

    def test_the_solution_still_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


# train-an-adapter: rank 2 asked; every program freezes the model and hands the optimizer the
# adapter alone, so the frozen-weight checks pass and only the adapter itself is wrong
ADAPTER = """
import torch
from torch import nn

def adapt(model, make_optimizer, A, B, loader, loss_fn, linear=False):
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        update = (h @ A.T @ B.T) if linear else (h @ A @ B)
        loss_fn(model[2](h) + update, y).backward()
        optimizer.step()
        optimizer.zero_grad()

def like(model):
    return {"dtype": torch.float64, "device": model[0].weight.device}
"""

ADAPTER_ROUTES = {
    # A = B = 0: every gradient of the adapter is zero, Adam's replay from there stays put too
    "zero-adapter-zeros": (
        "adapter-never-trains",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.zeros(4096, rank, **like(model)))
    B = nn.Parameter(torch.zeros(rank, 1024, **like(model)))
    adapt(model, make_optimizer, A, B, loader, loss_fn)
""",
    ),
    "zero-adapter-zeroed-in-place": (
        "adapter-never-trains",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.randn(4096, rank, **like(model)))
    B = nn.Parameter(torch.zeros(rank, 1024, **like(model)))
    with torch.no_grad():
        A.zero_()  # "so that the adapter adds nothing at first"
    adapt(model, make_optimizer, A, B, loader, loss_fn)
""",
    ),
    "zero-adapter-linear-layers": (
        "adapter-never-trains",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    down = nn.Linear(4096, rank, bias=False, **like(model))
    up = nn.Linear(rank, 1024, bias=False, **like(model))
    nn.init.constant_(down.weight, 0.0)
    nn.init.constant_(up.weight, 0.0)
    adapt(model, make_optimizer, down.weight, up.weight, loader, loss_fn, linear=True)
""",
    ),
    # rank 0: two empty parameters, never anything to train
    "rank-zero-empty": (
        "empty-adapter",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.empty(4096, 0, **like(model)))
    B = nn.Parameter(torch.empty(0, 1024, **like(model)))
    adapt(model, make_optimizer, A, B, loader, loss_fn)
""",
    ),
    "rank-zero-linear-layers": (
        "empty-adapter",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    down = nn.Linear(4096, 0, bias=False, **like(model))
    up = nn.Linear(0, 1024, bias=False, **like(model))
    adapt(model, make_optimizer, down.weight, up.weight, loader, loss_fn, linear=True)
""",
    ),
    # a rank of its own: trains right, but not the adapter asked for
    "rank-eight": (
        "adapter-wrong-rank",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    A = nn.Parameter(torch.randn(4096, 8, **like(model)) / 8)
    B = nn.Parameter(torch.zeros(8, 1024, **like(model)))
    adapt(model, make_optimizer, A, B, loader, loss_fn)
""",
    ),
    "rank-plus-one-linear-layers": (
        "adapter-wrong-rank",
        """
def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    down = nn.Linear(4096, rank + 1, bias=False, **like(model))
    up = nn.Linear(rank + 1, 1024, bias=False, **like(model))
    nn.init.zeros_(up.weight)
    adapt(model, make_optimizer, down.weight, up.weight, loader, loss_fn, linear=True)
""",
    ),
}


class TestTrainAnAdapter:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("model-memory/train-an-adapter")

    @pytest.mark.parametrize("route", ADAPTER_ROUTES)
    def test_a_wrong_adapter_does_not_pass(self, run, mode, route):
        """Each passed: the rank was never compared with the exercise's, and an adapter that
        cannot move agreed with the replay of Adam from where it started."""
        diagnosis, code = ADAPTER_ROUTES[route]
        outcome = run(ADAPTER + code, wall_seconds=30)
        assert outcome.status == "failed", outcome.verdict
        assert outcome.verdict["diagnosis"]["id"] == diagnosis, outcome.verdict
        failed = {c["name"] for c in outcome.verdict["checks"] if c["status"] == "failed"}
        frozen = {"Frozen weights unchanged", "No gradient for the frozen weights"}
        assert failed and not failed & frozen, outcome.verdict
        explanation = outcome.verdict["diagnosis"]["explanation"]
        if diagnosis == "adapter-wrong-rank":  # the learner's own rank, and the one asked for
            assert f"rank {8 if route == 'rank-eight' else 3} (" in explanation, explanation
            assert "asks for rank 2 (10,240 numbers)" in explanation, explanation
        elif diagnosis == "adapter-never-trains":
            assert "its 10,240 numbers are all still zero" in explanation, explanation

    def test_the_solution_still_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict
        names = [c["name"] for c in outcome.verdict["checks"]]
        assert "Rank of the adapter" in names and "The adapter trained" in names


# The other kinds whose pass rests on a list the child reports: emptied or cut short, each is no
# pass (the audit of issue 41; docs/security.md's table says what each pass rests on).
OTHER_ROUTES = {
    "input-pipeline-no-attempts": (
        "bottleneck/input-pipeline",
        ON_THE_LINK
        + """
from torch.utils.data import DataLoader

def make_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size)

rewrite_report(lambda d: d.update(attempts=0, batches=[]))
""",
    ),
    "read-the-gpu-trace-runs-emptied": (
        "bottleneck/read-the-gpu-trace",
        ON_THE_LINK
        + """
def read_trace(trace):
    return {"busy": 0.5, "idle_ms": 1.0, "bottleneck": "input"}

"""
        + EMPTIED,
    ),
    "read-the-gpu-trace-runs-cut-to-one": (
        "bottleneck/read-the-gpu-trace",
        ON_RETURN
        + """
def read_trace(trace):
    return {"busy": 0.5, "idle_ms": 1.0, "bottleneck": "input"}

"""
        + CUT_TO_ONE,
    ),
    "time-a-step-runs-emptied": (
        "bottleneck/time-a-step",
        ON_THE_LINK
        + """
def time_training(train_step, loader, synchronize):
    return {"step_ms": 16.0, "spread_ms": [15.0, 17.0], "same_batch_ms": 5.0, "bound": "input"}

rewrite_report(lambda d: d["runs"].clear())
""",
    ),
    "amp-loop-snapshots-emptied": (
        "mixed-precision/amp-loop",
        ON_RETURN
        + """
def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

rewrite_report(lambda d: d["snapshots"].clear())
""",
    ),
}


# amp-loop without the GradScaler: no scaling, the step with an inf skipped by hand, clipped on
# the true gradient (on the CPU its weights are the scaled loop's, bit for bit), and a report
# that says the scaler ran: every call, and the scale the scaler would have had. It passed while
# the scale was the child's word; now the supervisor reads the scaler's scale itself.
AMP_WITHOUT_SCALER = (
    ON_THE_LINK
    + """
import torch

SCALES = [1024.0, 2048.0, 4096.0, 2048.0, 4096.0, 8192.0, 16384.0]

def as_if_scaled(data):
    events = []
    for event in data["events"]:
        if event[0] == "B":
            events += [["scale"], event, ["unscale_"]]
        elif event[0] == "S":
            events += [["scaler.step"], event]
        else:
            events.append(event)
    # one scaler.step and update per batch, the skipped one included
    n = sum(1 for e in data["events"] if e[0] == "B")
    steps = sum(1 for e in events if e[0] == "scaler.step")
    events += [["scaler.step"]] * (n - steps) + [["update"]] * n
    data["events"] = events
    for clip in data["clips"]:
        clip["unscaled"] = True
        clip["scale"] = SCALES[clip["batch"]]
    for snap in data["snapshots"]:
        snap["scale"] = SCALES[snap["batch"]]
    data["final_scale"] = SCALES[-1]

rewrite_report(as_if_scaled)

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        loss.backward()  # no scaling at all
        finite = all(torch.isfinite(p.grad).all() for p in model.parameters())
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if finite:
            optimizer.step()
"""
)
# as many runs as asked, but not runs: answers with no timeline (an interference, not the
# grader's own failure)
OTHER_ROUTES["find-the-bottleneck-four-bare-answers"] = (
    "bottleneck/find-the-bottleneck",
    ON_THE_LINK + NOTHING_TRAINED + "\nrewrite_report(lambda d: d.update(runs=[{'answer': 'data'}] * 4))\n",
)
OTHER_ROUTES["amp-loop-scaler-calls-and-scale-in-the-report"] = (
    "mixed-precision/amp-loop",
    AMP_WITHOUT_SCALER,
)


@pytest.mark.parametrize("route", OTHER_ROUTES)
class TestOtherKinds:
    @pytest.fixture
    def exercise(self, route):
        """``run`` grades the route's exercise in this class."""
        return find_exercise(OTHER_ROUTES[route][0])

    def test_a_short_report_does_not_pass(self, run, mode, route):
        outcome = run(OTHER_ROUTES[route][1], wall_seconds=60)
        _not_passed(outcome)
        assert (outcome.verdict["diagnosis"] or {}).get("id") != "grader-trouble", outcome.verdict
