"""Forging a pass (issue 13, docs/security.md "What is trusted and what is not"): each program
runs a loop that is wrong where the check can only tell by measuring (right numbers, four
micro-batches' activations alive at once; a loop over a third of the batches), then tries one way
of making the verdict say otherwise. None may pass: the learner's code runs in a child of the
harness that holds no channel to the verdict, and what a pass rests on is observed by the harness
(parameters in memory it reads itself, the batches it serves), with what the child reports
cross-checked against it.
"""

import json

import pytest

from app.config import get_settings
from app.lessons.course import load_course
from tests.sandbox.conftest import ANY_START

pytestmark = pytest.mark.slow  # real sandboxes, real torch

# the numbers are right, the memory is not: every micro-batch of a cycle alive at once
CONCATENATED = """
import gc, json, os, sys
import torch

def concatenated(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        chunk = batches[start:start + accum_steps]
        model.zero_grad()
        loss_fn(model(torch.cat([b[0] for b in chunk])), torch.cat([b[1] for b in chunk])).backward()
        optimizer.step()
"""

# a well-formed trace of a passing run, built from the harness's own recorder
FORGE = """
def flat(tensors):
    return torch.cat([t.detach().reshape(-1).double() for t in tensors]).tolist()

def forged_trace(model=None):
    # the harness's recorder where gc still finds it (its objects are frozen before the watch
    # now, out of gc.get_objects()' reach), else the model's own parameters and plain counts
    rec = next((o for o in gc.get_objects() if type(o).__name__ == "Recorder"), None)
    params = rec.params if rec is not None else list(model.parameters())
    counts = (rec.steps, rec.steps_total, rec.forwards, rec.backwards) if rec is not None else ([], 3, 12, 12)
    data = {"initial_params": [], "final_params": flat(params), "events": [],
            "events_dropped": 0, "steps": counts[0], "steps_total": counts[1],
            "clips": [], "clips_total": 0, "calls": [], "forwards": counts[2],
            "backwards": counts[3], "peak_saved_bytes": 0, "final_scale": None}
    return json.dumps({"version": 1, "kind": "accumulation", "outcome": "ok", "error": None,
                       "data": data, "output": "", "output_dropped": 0, "timings": {}}).encode()

def deliver(payload):
    \"\"\"The trace into every memory file this process holds, then "done" on every pipe.\"\"\"
    import stat
    pipes = []
    for fd in range(3, 256):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        try:
            if stat.S_ISREG(mode):
                os.ftruncate(fd, 0)
                os.pwrite(fd, payload, 0)
            elif stat.S_ISFIFO(mode):
                pipes.append(fd)
        except OSError:
            pass
    for fd in pipes:
        try:
            os.write(fd, b"D")
        except OSError:
            pass
"""

# each micro-batch's gradient taken as a decoy where the meter sees it (so that some bytes are
# seen saved), then the whole cycle joined and backpropagated once by ``hidden``, where it is not
DECOYS = """
import torch

def train(model, loader, loss_fn, optimizer, accum_steps):
    params = list(model.parameters())
    batches = list(loader)
    for c in range(0, len(batches), accum_steps):
        cycle = batches[c : c + accum_steps]
        for x, y in cycle:
            torch.autograd.grad(loss_fn(model(x), y).sum(), params)
        x = torch.cat([b[0] for b in cycle])
        y = torch.cat([b[1] for b in cycle])
        optimizer.zero_grad()
        hidden(lambda: loss_fn(model(x), y).backward())
        optimizer.step()
"""

ROUTES = {
    # 1: a complete fake trace into the inherited trace descriptor, then "done"
    "fake-trace-on-inherited-descriptor": CONCATENATED
    + FORGE
    + """
def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
    deliver(forged_trace(model))
    import time
    time.sleep(5)
""",
    # 2: the harness's trace writer replaced through sys.modules
    "write-trace-replaced": CONCATENATED
    + """
runtime = sys.modules.get("harness.runtime")
if runtime is not None:
    real = runtime.write_trace
    def write_trace(out_dir, trace, limit):
        if isinstance(trace.get("data"), dict):
            trace["data"]["peak_saved_bytes"] = 0
        return real(out_dir, trace, limit)
    runtime.write_trace = write_trace

def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
""",
    # 3: the meter found with gc and reset, after every cycle and at the end
    "meter-reset-through-gc": CONCATENATED
    + """
def reset():
    for o in gc.get_objects():
        if type(o).__name__ in ("SavedTensorMeter", "LiveTensorMeter"):
            for name in ("peak", "live", "packed", "freed"):
                try:
                    setattr(o, name, 0)
                except AttributeError:  # a computed figure: its parts are reset
                    pass

def train(model, loader, loss_fn, optimizer, accum_steps):
    step = optimizer.step
    def stepped(*a, **k):
        reset()
        return step(*a, **k)
    optimizer.step = stepped
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
    reset()
""",
    # 3b: a function the meter uses replaced in its module
    "meter-max-replaced": CONCATENATED
    + """
memory = sys.modules.get("harness.memory")
if memory is not None:
    memory.max = lambda *args: 0

def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
""",
    # 4: saved activations hidden under an inner saved_tensors_hooks (public API)
    "activations-hidden-by-inner-hooks": CONCATENATED
    + """
def train(model, loader, loss_fn, optimizer, accum_steps):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        concatenated(model, loader, loss_fn, optimizer, accum_steps)
""",
    # 4b: the torch class the meter is built on replaced before the harness builds it
    "torch-hooks-replaced": CONCATENATED
    + """
class Nothing:
    def __init__(self, pack, unpack):
        pass
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False

torch.autograd.graph.saved_tensors_hooks = Nothing

def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
""",
    # the cycle's whole backward run on another thread, where the meter's hooks are not
    "backward-on-another-thread": DECOYS
    + """
import threading

def hidden(backward):
    t = threading.Thread(target=backward)
    t.start()
    t.join()
""",
    # the whole cycle's backward under saved-tensor hooks of its own (public API)
    "decoys-then-cycle-under-own-hooks": DECOYS
    + """
def hidden(backward):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        backward()
""",
    # hooks of its own dressed as torch's checkpoint's (functools.wraps gives them __wrapped__)
    # around a cycle summed and backpropagated once
    "hooks-dressed-as-checkpoints": """
import functools
import torch
from torch.utils.checkpoint import noop_context_fn

@functools.wraps(noop_context_fn)
def keep(tensor):
    return tensor

def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    total = 0
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        for step, (x, y) in enumerate(loader):
            total = total + loss_fn(model(x), y) / accum_steps
            if (step + 1) % accum_steps == 0:
                total.backward()
                total = 0
                optimizer.step()
                optimizer.zero_grad()
""",
    # activations kept on ctx attributes (never saved through hooks), the micro-batches joined,
    # one checkpoint call as a decoy so that fewer bytes seen look like checkpointing
    "ctx-attributes-behind-a-checkpoint-decoy": """
import torch
from torch.utils.checkpoint import checkpoint

class Layer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, act):
        out = torch.addmm(bias, h, weight.t())
        if act:
            out = torch.tanh(out)
        ctx.h, ctx.weight, ctx.out, ctx.act = h, weight, out, act
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.act:
            grad = grad * (1 - ctx.out * ctx.out)
        return grad @ ctx.weight, grad.t() @ ctx.h, grad.sum(0), None

def train(model, loader, loss_fn, optimizer, accum_steps):
    direct, read = model.direct, model.read
    batches = list(loader)
    checkpoint(model, batches[0][0][:1], use_reentrant=False)
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        x = torch.cat([b[0] for b in cycle])
        y = torch.cat([b[1] for b in cycle])
        out = Layer.apply(x, direct.weight, direct.bias, False)
        out = out + Layer.apply(torch.relu(x @ model.expand.t()), read.weight, read.bias, False)
        optimizer.zero_grad()
        loss_fn(out, y).backward()
        optimizer.step()
""",
    # the harness killed (when it is the parent), then the fake trace delivered
    "harness-killed-then-fake-trace": CONCATENATED
    + FORGE
    + """
import signal
def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
    payload = forged_trace(model)
    parent = os.getppid()
    try:
        cmdline = open(f"/proc/{parent}/cmdline", "rb").read()
    except OSError:
        cmdline = b""
    if b"harness.run" in cmdline or b"harness.template" in cmdline:  # never a process outside the job
        os.kill(parent, signal.SIGKILL)
    deliver(payload)
    import time
    time.sleep(5)
""",
    # a grandchild that outlives the loop and rewrites the trace file once it appears
    "grandchild-rewrites-the-trace": CONCATENATED
    + """
import time

def rewrite():
    path = os.path.abspath("out/trace.json")
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            with open(path) as f:
                trace = json.load(f)
            if trace.get("data", {}).get("peak_saved_bytes"):
                trace["data"]["peak_saved_bytes"] = 0
                with open(path + ".x", "w") as f:
                    json.dump(trace, f)
                os.replace(path + ".x", path)
        except (OSError, ValueError):
            pass
        time.sleep(0.0005)

def train(model, loader, loss_fn, optimizer, accum_steps):
    concatenated(model, loader, loss_fn, optimizer, accum_steps)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            rewrite()
        os._exit(0)
    time.sleep(0.05)
""",
}


# how each route ends: judged on what was observed (the memory check fails), or refused as
# interference (the report and the observations disagree), or the run is lost (the harness died)
ENDS = {
    "fake-trace-on-inherited-descriptor": "failed",
    "write-trace-replaced": "failed",
    "meter-reset-through-gc": "interfered",
    "meter-max-replaced": "interfered",
    # the saved-tensor meter composes with a loop's own hooks (6c18fb4): what they hide is
    # counted, so these are judged on what they really held (the micro-batches joined: 3.99x)
    "activations-hidden-by-inner-hooks": "failed",
    "torch-hooks-replaced": "failed",
    "harness-killed-then-fake-trace": "error",
    # threads may run in accumulate now (its memory is the kernel's count of the process): the
    # cycle's backward on another thread holds the whole cycle's activations, and the kernel says so
    "backward-on-another-thread": "failed",
    # these three passed: the meter now checks at every forward and loss that its hooks (or
    # torch's checkpoint's, known by code) are on top, and fewer bytes seen pass only where
    # every backward recomputed its forward under checkpoint
    "decoys-then-cycle-under-own-hooks": "failed",  # (counted through their own hooks, as above)
    "hooks-dressed-as-checkpoints": "failed",
    "ctx-attributes-behind-a-checkpoint-decoy": "failed",  # the kernel counted the joined cycle
    "grandchild-rewrites-the-trace": "error",  # failed on memory before the child could not fork
}


# routes through what the two starts build differently (the descriptors each hands the job, how
# the job's death is seen): under both (conftest's PAIRS); the rest attack the harness inside the
# job, the same code under both starts (tests/sandbox/conftest.py, ANY_START): once per sandbox kind
BOTH_STARTS = ("fake-trace-on-inherited-descriptor", "harness-killed-then-fake-trace")


# the meter's figure (the program's own, naming the mistake) and the kernel's (what a pass rests on)
MEMORY_CHECKS = ("Activation memory", "Memory, as the system counted it")


def _forged(run, route) -> None:
    outcome = run(ROUTES[route], wall_seconds=30)
    assert outcome.status != "passed", outcome.verdict
    end = ENDS[route]
    if end == "failed":
        assert outcome.status == "failed", outcome.verdict
        memory = [c for c in outcome.verdict["checks"] if c["name"] in MEMORY_CHECKS]
        assert memory and "failed" in {c["status"] for c in memory}, outcome.verdict
    else:
        assert outcome.status == "error", outcome.verdict
    if end == "interfered":
        assert "this run cannot be judged" in outcome.verdict["checks"][0]["message"]


@pytest.mark.parametrize("route", BOTH_STARTS)
def test_a_pass_forged_through_what_the_starts_build_does_not_pass(run, mode, route):
    _forged(run, route)


@ANY_START
@pytest.mark.parametrize("route", [route for route in ROUTES if route not in BOTH_STARTS])
def test_a_forged_pass_does_not_pass(run, mode, route):
    _forged(run, route)


def test_the_harness_memory_and_descriptors_are_out_of_reach(run, mode):
    """The child cannot open its parent's memory or descriptors (the harness is not dumpable;
    ptrace and process_vm_writev are refused by the filter under bwrap)."""
    outcome = run("""
import os
def train(*args):
    parent = os.getppid()
    for what in ("mem", "fd", "environ"):
        try:
            if what == "fd":
                os.listdir(f"/proc/{parent}/fd")
            else:
                open(f"/proc/{parent}/{what}", "rb").read(1)
            print(what, "open")
        except OSError as exc:
            print(what, "refused", type(exc).__name__)
""")
    assert outcome.status != "passed"
    output = outcome.verdict["output"]
    if mode == "bwrap":  # a root worker's process-only sandbox runs the job as root: no refusal there
        for what in ("mem", "fd", "environ"):
            assert f"{what} refused" in output, output


CLEAN_LOOP = """
def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_clean_loop_still_passes_beside_the_routes(run, mode):
    """The control: the reference loop passes through the same supervised path."""
    outcome = run(CLEAN_LOOP)
    assert outcome.status == "passed", outcome.verdict


# find-the-bottleneck: one pass over the loader, each phase labelled, the slow one named
PARTIAL_PASS_PADDED = """
import gc, time
from torch.profiler import record_function

def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = {"data": 0.0, "backward": 0.0}
    batches = iter(loader)
    for _ in range(2):  # a third of the batches
        started = time.perf_counter()
        with record_function("data"):
            x, y = next(batches)
        spent["data"] += time.perf_counter() - started
        with record_function("forward"):
            loss = loss_fn(model(x), y)
        started = time.perf_counter()
        with record_function("backward"):
            loss.backward()
        spent["backward"] += time.perf_counter() - started
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
    # the counts forged: every timed point repeated until there is one per batch
    for run in (o for o in gc.get_objects() if type(o).__name__ == "Run"):
        for spans in run.points.values():
            while spans and len(spans) < len(loader):
                spans.append(spans[-1])
    return max(spent, key=spent.get)
"""


LABELLED_LOOP = """
from torch.profiler import record_function

def labelled_loop(model, loader, loss_fn, optimizer):
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
"""


@ANY_START  # the harness's own meters and servers inside the job (conftest)
class TestFindTheBottleneck:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        found = load_course(get_settings().lessons_dir).exercise("bottleneck/find-the-bottleneck")
        assert found is not None
        return found

    def test_forged_batch_counts(self, run, mode):
        outcome = run(PARTIAL_PASS_PADDED)
        assert outcome.status != "passed", outcome.verdict

    def test_the_slow_phase_cannot_be_read_from_memory(self, run, mode):
        """It passed when the harness's step wrapper held the slow phase in a closure cell;
        now the supervisor draws it after the fork, and the child holds nothing that tells."""
        outcome = run(
            LABELLED_LOOP
            + """
import gc

def find_bottleneck(model, loader, loss_fn, optimizer):
    labelled_loop(model, loader, loss_fn, optimizer)
    cells = dict(zip(optimizer.step.__code__.co_freevars, optimizer.step.__closure__ or ()))
    if "slow" in cells:
        return cells["slow"].cell_contents
    for o in gc.get_objects():
        for name in ("slowed", "pace"):
            found = getattr(o, name, None) if type(o).__name__ == "Observer" else None
            if found:
                order = list(found) if name == "slowed" else [k[0] for k in found]
                return {"fetch": "data", "step": "optimizer"}.get(order[0], order[0])
    for module in model.modules():
        for phase in ("forward", "backward"):
            if getattr(module, phase + "_s", 0):
                return phase
    return "data"
"""
        )
        assert outcome.status == "failed", outcome.verdict
        answer = next(c for c in outcome.verdict["checks"] if c["name"] == "Slowest phase")
        assert answer["status"] == "failed", outcome.verdict

    def test_forward_and_backward_faked_on_the_timeline_are_interference(self, run, mode):
        """No forward or backward run, their timeline points written by hand: it passed when only
        fetches and steps were the supervisor's to count."""
        outcome = run("""
import time
from torch.profiler import record_function

def find_bottleneck(model, loader, loss_fn, optimizer):
    run = loader._run
    batches = iter(loader)
    for _ in range(len(loader)):
        with record_function("data"):
            next(batches)
        for phase in ("forward", "backward"):
            with record_function(phase):
                t = time.perf_counter()
                run.point(phase, t, t)
        with record_function("optimizer"):
            optimizer.step()
    return "data"
""")
        assert outcome.status == "error", outcome.verdict
        assert "this run cannot be judged" in outcome.verdict["checks"][0]["message"]

    def test_a_flood_of_ranges_is_refused_at_once_and_the_next_run_is_judged(self, run, mode, exercise):
        """Issue 27: 20,000 ranges appended to the timeline the harness reports (its counts
        agreeing with the supervisor's) held the worker for hours in checks that were O(points x
        ranges x points). The trace's schema caps the ranges now, and the checks sort and sweep."""
        from pathlib import Path

        outcome = run(
            LABELLED_LOOP
            + """
def find_bottleneck(model, loader, loss_fn, optimizer):
    labelled_loop(model, loader, loss_fn, optimizer)
    for i in range(20000):
        loader._run.ranges.append(["data", float(i), float(i) + 0.5])
    return "data"
"""
        )
        assert outcome.status == "error", outcome.verdict
        assert "this run cannot be judged" in outcome.verdict["checks"][0]["message"]
        assert outcome.verdict["metrics"].get("check_ms", 0) < 1000, outcome.verdict
        solution = (Path(exercise.path) / "solution.py").read_text()
        after = run(solution)
        assert after.status == "passed", after.verdict
        assert after.seconds < 30, after


# fit-the-budget: the naive step (every activation alive at once), the meter told otherwise
NAIVE_METER_RESET = """
import gc

def train_step(model, x, y, loss_fn, optimizer):
    loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    for o in gc.get_objects():
        if type(o).__name__ == "LiveTensorMeter":
            o.peak = 0
"""


@ANY_START  # the harness's own meters and servers inside the job (conftest)
class TestFitTheBudget:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        found = load_course(get_settings().lessons_dir).exercise("gpu-memory/fit-the-budget")
        assert found is not None
        return found

    # threading and os.fork name the limit to the learner (instrument.name_limits); _thread and
    # posix are what they wrap, left as they are: the child's filter is what refuses both
    @pytest.mark.parametrize(
        ("thread", "said"),
        [
            ("threading.Thread(target=naive).start()", "starting a thread or a process is refused here"),
            ("_thread.start_new_thread(naive, ())", "can't start new thread"),
        ],
    )
    def test_the_naive_step_on_another_thread_cannot_start(self, run, mode, thread, said):
        """The live-tensor meter is a dispatch mode, which is per thread: the naive step run on
        another thread passed (peak 0 bytes); the child of a memory kind can start no thread."""
        outcome = run(f"""
import _thread, threading, time

def train_step(model, x, y, loss_fn, optimizer):
    def naive():
        loss_fn(model(x), y).backward()
    {thread}
    time.sleep(0.2)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""")
        assert outcome.status == "error", outcome.verdict
        assert said in outcome.text, outcome.verdict

    @pytest.mark.parametrize(
        "hidden", ["", "torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)"]
    )
    def test_the_naive_step_with_the_meter_off_the_dispatch_stack_is_interference(self, run, mode, hidden):
        """Both passed with a peak of 0 bytes (the second also hides what autograd saves from the
        meter's own hooks); the meter now learns of every tensor saved for backward and every
        gradient accumulated, and reports when it was switched off for either."""
        outcome = run(f"""
import torch
from torch.utils._python_dispatch import _disable_current_modes

def train_step(model, x, y, loss_fn, optimizer):
    with _disable_current_modes(){", " + hidden if hidden else ""}:
        loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""")
        assert outcome.status == "error", outcome.verdict
        assert "this run cannot be judged" in outcome.verdict["checks"][0]["message"]

    @pytest.mark.parametrize(
        ("fork", "said"),
        [
            ("os.fork", "starting a thread or a process is refused here"),
            ("posix.fork", "Operation not permitted"),
        ],
    )
    def test_the_naive_step_in_another_process_cannot_start(self, run, mode, fork, said):
        """The naive step in a forked process cut off from the supervisor, its gradients copied
        back through shared memory: it passed (0.48x the naive step); the child of a memory kind
        can start no process."""
        outcome = run(f"""
import os, posix
import torch
from torch.utils._python_dispatch import _disable_current_modes

def train_step(model, x, y, loss_fn, optimizer):
    params = list(model.parameters())
    out = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64).share_memory_()
    pid = {fork}()
    if pid == 0:
        os.closerange(3, 1 << 16)
        with _disable_current_modes(), torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            grads = torch.autograd.grad(loss_fn(model(x), y), params)
            out.copy_(torch.cat([g.reshape(-1) for g in grads]))
        os._exit(0)
    os.waitpid(pid, 0)
    offset = 0
    for p in params:
        p.grad = out[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""")
        assert outcome.status == "error", outcome.verdict
        assert said in outcome.text, outcome.verdict

    def test_a_meter_reset_through_gc_is_interference(self, run, mode):
        outcome = run(NAIVE_METER_RESET)
        assert outcome.status == "error", outcome.verdict  # it passed before the split
        assert "this run cannot be judged" in outcome.verdict["checks"][0]["message"]


# input-pipeline: the loop must be faster over the learner's loader, with the dataset's own
# batches; the items and the waits are the supervisor's (worker/harness/pipeline.py)
PIPELINE_ROUTES = {
    # loading made free once the baseline has been timed
    "sleep-patched": """
import time
from torch.utils.data import DataLoader

def make_loader(dataset, batch_size):
    time.sleep = lambda seconds: None
    return DataLoader(dataset, batch_size=batch_size)
""",
    # the clock slowed down for the learner's loops
    "clock-patched": """
import time
real = time.perf_counter
time_monotonic = time.monotonic

def make_loader(dataset, batch_size):
    from torch.utils.data import DataLoader
    time.perf_counter = lambda: real() / 3
    time.monotonic = lambda: time_monotonic() / 3
    return DataLoader(dataset, batch_size=batch_size)
""",
    # the batches of the first attempt kept and given again, at no wait
    "batches-replayed": """
from torch.utils.data import DataLoader
kept = []

def make_loader(dataset, batch_size):
    if not kept:
        kept.extend(DataLoader(dataset, batch_size=batch_size, num_workers=4))
    return kept
""",
    # the items made here from the server's seed, looked for with gc
    "items-made-from-a-seed-found-with-gc": """
import gc
import torch
from harness import scenarios

def make_loader(dataset, batch_size):
    server = next((o for o in gc.get_objects() if type(o).__name__ == "Items"), None)
    seeds = list(getattr(server, "seeds", [])) or [0]
    n = len(dataset)
    return [
        (torch.tensor([scenarios.ITEM.unpack(scenarios.pipeline_item(seeds[-1], i))
                       for i in range(s, min(s + batch_size, n))]),
         torch.arange(s, min(s + batch_size, n)))
        for s in range(0, n, batch_size)
    ]
""",
}


@ANY_START  # the harness's own meters and servers inside the job (conftest)
class TestInputPipeline:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        found = load_course(get_settings().lessons_dir).exercise("bottleneck/input-pipeline")
        assert found is not None
        return found

    @pytest.mark.parametrize("route", PIPELINE_ROUTES)
    def test_a_forged_speed_up_does_not_pass(self, run, mode, route):
        """Each passed before the items were the supervisor's (a 190x speed-up, or the data
        made without waiting); now the run is judged on what it really asked for and when."""
        outcome = run(PIPELINE_ROUTES[route])
        assert outcome.status == "failed", outcome.verdict
        failed = {c["name"] for c in outcome.verdict["checks"] if c["status"] == "failed"}
        assert failed == ({"Throughput"} if "patched" in route else {"Batches"}), outcome.verdict


# the supervisor reached from the child (issue 27): stopped while it writes its trace, so that a
# passing trace captured from an earlier run takes its place
REACH = """
import ctypes, json, os, select, signal, struct, time

CAPTURED = {captured!r}
libc = ctypes.CDLL(None, use_errno=True)

def plant(path):
    with open(path + ".x", "w") as f:
        f.write(CAPTURED)
    os.replace(path + ".x", path)

def everywhere(boss):
    \"\"\"The captured trace into every place this process can write, and every descriptor of
    the supervisor's it can open.\"\"\"
    for name in ("out/trace.json", "out/trace.json.tmp", "trace.json", "tmp/trace.json",
                 "/tmp/trace.json", "/dev/shm/trace.json", "spec.json"):
        try:
            os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
            plant(name)
        except OSError as exc:
            print(name, type(exc).__name__)
    for fd in range(64):
        try:
            with open(f"/proc/{{boss}}/fd/{{fd}}", "w") as f:
                f.write(CAPTURED)
            print("wrote the supervisor's descriptor", fd)
        except OSError:
            pass

def train(model, loader, loss_fn, optimizer, accum_steps):
    boss = os.getppid()
    os.makedirs("out", exist_ok=True)  # where the trace was written before (issue 27)
    watch = libc.inotify_init()
    libc.inotify_add_watch(watch, b"out", 0x100 | 0x80)  # IN_CREATE | IN_MOVED_TO
    {attack}
    end = time.monotonic() + 3
    while time.monotonic() < end:
        if not select.select([watch], [], [], 0.1)[0]:
            continue
        raw = os.read(watch, 4096)
        names = []
        while raw:
            _, _, _, size = struct.unpack("iIII", raw[:16])
            names.append(raw[16 : 16 + size].rstrip(b"\\0").decode())
            raw = raw[16 + size :]
        for name in names:
            if name in ("trace.json.tmp", "trace.json"):
                try:
                    os.kill(boss, signal.SIGSTOP)
                    plant("out/" + name)
                except OSError:
                    pass
                finally:
                    try:
                        os.kill(boss, signal.SIGCONT)
                    except OSError:
                        pass
"""

ATTACKS = {
    "sigint": "os.kill(boss, signal.SIGINT)",
    "sigterm": "os.kill(boss, signal.SIGTERM)",
    "sigint-reniced": "os.setpriority(os.PRIO_PROCESS, boss, 19); os.kill(boss, signal.SIGINT)",
    "sigkill": "os.kill(boss, signal.SIGKILL)",
    "ptrace": (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print('ptrace', libc.ptrace(16, boss, 0, 0), ctypes.get_errno()); "
        "os.kill(boss, signal.SIGINT)"
    ),
    "stopped-only": "pass",
    "writes-everywhere": "everywhere(boss)",
}


@pytest.fixture(scope="module")
def captured(request):
    """A passing trace of the accumulate exercise, as the worker read it from a clean run."""
    return {}


@ANY_START  # the supervisor and the child it forks: the same code under both starts (conftest)
@pytest.mark.parametrize("attack", ATTACKS)
def test_the_child_cannot_reach_its_supervisor(run, mode, start, captured, monkeypatch, attack):
    """It passed on every exercise tried: SIGINT to os.getppid() made KeyboardInterrupt escape
    the supervisor (no kill, no sweep), whose catch-all then wrote a trace through /job/out while
    the child lived; the child stopped it there and planted a passing trace. Now the supervisor
    ignores what it can, the child can stop, renice or trace none of its ancestors, and the trace
    goes straight into a descriptor only the supervisor holds. Each attempt ends unpassed, at
    normal speed, and the clean loop graded next passes."""
    from worker import grading

    if (mode, start) not in captured:
        real = grading._judge
        seen = {}

        def spy(exercise, trace, *args):
            seen["trace"] = trace
            return real(exercise, trace, *args)

        with monkeypatch.context() as m:
            m.setattr(grading, "_judge", spy)
            assert run(CLEAN_LOOP).status == "passed"
        captured[(mode, start)] = json.dumps(seen["trace"])
    code = REACH.format(captured=captured[(mode, start)], attack=ATTACKS[attack])
    outcome = run(code, wall_seconds=30, code_kb=512)  # the captured trace is large
    assert outcome.status != "passed", outcome.verdict
    assert outcome.job_seconds < 15, outcome.verdict  # not held to the wall limit
    assert "wrote the supervisor's descriptor" not in outcome.verdict["output"], outcome.verdict
    after = run(CLEAN_LOOP)
    assert after.status == "passed", after.verdict
