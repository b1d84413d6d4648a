"""Reports rewritten from inside (issue 41, classes 2 and 3): each program runs a loop that is
wrong only in its memory (right numbers, every activation or gradient alive at once, or the
configuration asked for ignored), then silences or rewrites what the child reports about it:
the meters (patched in their module, found with ``gc``, followed by a frame hook), the lists
and flags a kind records (reached through ``gc``, closure cells, the hooks on the model it is
handed), or the kernel's own high-water mark (``/proc/self/clear_refs``). None may pass: a pass
on memory rests on the parameters the supervisor reads and the memory the kernel counts
(worker/checks/kernel_memory.py), and the child's figures only name the mistake. Each exercise's
solution still passes through the same path. Every program runs under both starts (conftest's
PAIRS): what the child can reach differs with neither, but its memory is counted by each.
"""

from pathlib import Path

import pytest

from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch


def _not_passed(outcome):
    """Not a pass, and where the memory was judged from the kernel's count, a line of those
    says it did not fit (another such line may pass: fit-the-budget's naive step does release
    its gradients)."""
    assert outcome.status in ("failed", "error"), outcome.verdict
    kernel = [c for c in outcome.verdict["checks"] if "system" in c["name"]]
    assert not kernel or [c for c in kernel if c["status"] == "failed"], outcome.verdict


# accumulate: right numbers, a whole cycle's activations alive at once
BACKWARD_ONCE = """
import gc, sys
import torch

def backward_once(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    total = 0
    for step, (x, y) in enumerate(loader):
        total = total + loss_fn(model(x), y) / accum_steps
        if (step + 1) % accum_steps == 0:
            total.backward()
            optimizer.step()
            optimizer.zero_grad()
            total = 0
"""

ACCUMULATE = {
    # every tensor the meter holds freed as it is counted, the meter found with gc: the bytes
    # packed are all there, the peak is 0 (this one passed before: "0 bytes")
    "meter-freed-at-once-through-gc": BACKWARD_ONCE
    + """
def train(model, loader, loss_fn, optimizer, accum_steps):
    meter = next(o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter")
    def hold(value, nbytes):
        meter.packed += nbytes
        meter.freed += nbytes
        meter._report(meter.packed, meter.freed)
        return value
    meter._hold = hold
    backward_once(model, loader, loss_fn, optimizer, accum_steps)
""",
    # the same, patched on the meter's class in its module (sys.modules)
    "meter-class-patched": BACKWARD_ONCE
    + """
meter_class = sys.modules["harness.memory"].SavedTensorMeter
def hold(self, value, nbytes):
    self.packed += nbytes
    self.freed += nbytes
    if self._report is not None:
        self._report(self.packed, self.freed)
    return value
meter_class._hold = hold

def train(model, loader, loss_fn, optimizer, accum_steps):
    backward_once(model, loader, loss_fn, optimizer, accum_steps)
""",
    # the meter caught by a frame hook as it holds its first tensor, then made to free the rest
    # as it counts them
    "meter-caught-by-a-frame-hook": BACKWARD_ONCE
    + """
def catch(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_hold":
        meter = frame.f_locals.get("self")
        if type(meter).__name__ == "SavedTensorMeter":
            sys.setprofile(None)
            def hold(value, nbytes):
                meter.packed += nbytes
                meter.freed += nbytes
                meter._report(meter.packed, meter.freed)
                return value
            meter._hold = hold

def train(model, loader, loss_fn, optimizer, accum_steps):
    sys.setprofile(catch)
    try:
        backward_once(model, loader, loss_fn, optimizer, accum_steps)
    finally:
        sys.setprofile(None)
""",
    # the activations saved past the meter, its check switched off, and a "recomputed" note sent
    # per backward: the notes once waived the rule that the meter must see them
    "recomputed-notes-sent": BACKWARD_ONCE
    + """
def train(model, loader, loss_fn, optimizer, accum_steps):
    meter = next(o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter")
    meter.check_on = lambda: None
    batches = list(loader)
    optimizer.zero_grad()
    for c in range(0, len(batches), accum_steps):
        torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t, lambda t: t)
        total = sum(loss_fn(model(x), y) for x, y in batches[c : c + accum_steps]) / accum_steps
        torch._C._autograd._pop_saved_tensors_default_hooks()
        meter._report(meter.packed, meter.freed, 2)
        total.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
    # the meter's peak kept at 0 as in the first route, and the kernel's high-water mark raised
    # far above the memory run's before it starts (a large tensor made and freed at import): a
    # mark that never rises again leaves the run's peak to the supervisor's readings of the
    # resident set, every 2 ms, which still see a whole cycle's activations
    "high-water-mark-raised-first": BACKWARD_ONCE
    + """
torch.ones(96 * 2**20 // 4).sum()  # 96 MiB at once, then freed: the lifetime mark stays there

def train(model, loader, loss_fn, optimizer, accum_steps):
    meter = next((o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter"), None)
    if meter is not None:
        def hold(value, nbytes):
            meter.packed += nbytes
            meter.freed += nbytes
            meter._report(meter.packed, meter.freed)
            return value
        meter._hold = hold
    backward_once(model, loader, loss_fn, optimizer, accum_steps)
""",
    # the meter's peak kept at 0 as in the first route, and the kernel's high-water mark reset
    # before every step (after the cycle's backward)
    "high-water-mark-reset": BACKWARD_ONCE
    + """
import ctypes

def reset_mark():
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self is ours again
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass

def train(model, loader, loss_fn, optimizer, accum_steps):
    meter = next((o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter"), None)
    if meter is not None:
        def hold(value, nbytes):
            meter.packed += nbytes
            meter.freed += nbytes
            meter._report(meter.packed, meter.freed)
            return value
        meter._hold = hold
    step = optimizer.step
    def stepped(*args, **kwargs):
        reset_mark()
        return step(*args, **kwargs)
    optimizer.step = stepped
    backward_once(model, loader, loss_fn, optimizer, accum_steps)
""",
    # threads may run here (memory is the kernel's count of the process, which holds them): a
    # whole cycle's forwards and backward on a thread of the loop's own, where the meter's hooks
    # (per thread) never see what is saved
    "cycle-on-a-thread": """
import threading

def train(model, loader, loss_fn, optimizer, accum_steps):
    def cycle(batch):
        (sum(loss_fn(model(x), y) for x, y in batch) / accum_steps).backward()

    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        worker = threading.Thread(target=cycle, args=(batches[start : start + accum_steps],))
        worker.start()
        worker.join()
        optimizer.step()
        optimizer.zero_grad()
""",
    # the cycle's backward in a process of its own, forked through the C library past Python's
    # os.fork: the kernel would count its memory apart, and the child's filter refuses it
    "cycle-in-a-process-forked-through-libc": BACKWARD_ONCE
    + """
import ctypes, os, pickle

def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        read, write = os.pipe()
        pid = ctypes.CDLL(None).fork()
        if pid < 0:
            raise OSError(ctypes.get_errno(), "fork refused")
        if pid == 0:
            total = sum(loss_fn(model(x), y) for x, y in batches[start : start + accum_steps])
            (total / accum_steps).backward()
            os.write(write, pickle.dumps([p.grad for p in model.parameters()]))
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            grads = pickle.loads(f.read())
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p.grad = g
        optimizer.step()
        optimizer.zero_grad()
""",
    # a ballast (issue 41): 48 MiB made at import and held through the first run, freed as the
    # memory run begins, the meter's peak kept at 0 as in the first route. From the run's start
    # the kernel saw the cycle fit under the memory the ballast had raised (0-24 MiB: this
    # passed); counted from before the file loaded, as the check now counts it too, it does not
    "ballast-freed-as-the-memory-run-begins": BACKWARD_ONCE
    + """
ballast = [torch.ones(6 * 2**20, dtype=torch.float64)]
runs = []

def train(model, loader, loss_fn, optimizer, accum_steps):
    runs.append(1)
    if len(runs) > 1:  # the memory run
        ballast.clear()
    meter = next((o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter"), None)
    if meter is not None:
        def hold(value, nbytes):
            meter.packed += nbytes
            meter.freed += nbytes
            meter._report(meter.packed, meter.freed)
            return value
        meter._hold = hold
    backward_once(model, loader, loss_fn, optimizer, accum_steps)
""",
    # the same ballast freed a piece at a time as the cycle's forwards run in the memory run, so
    # the resident set never falls below where the run began
    "ballast-freed-piece-by-piece": BACKWARD_ONCE
    + """
ballast = [torch.ones(2**20, dtype=torch.float64) for _ in range(6)]
runs = []

def drop(module, args):
    if ballast:
        del ballast[-2:]  # 16 MiB before each of the cycle's forwards

def train(model, loader, loss_fn, optimizer, accum_steps):
    runs.append(1)
    if len(runs) > 1:  # the memory run
        model.register_forward_pre_hook(drop)
    meter = next((o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter"), None)
    if meter is not None:
        def hold(value, nbytes):
            meter.packed += nbytes
            meter.freed += nbytes
            meter._report(meter.packed, meter.freed)
            return value
        meter._hold = hold
    backward_once(model, loader, loss_fn, optimizer, accum_steps)
""",
}


@pytest.mark.parametrize("route", ACCUMULATE)
def test_accumulate_with_a_rewritten_report_does_not_pass(run, mode, route):
    _not_passed(run(ACCUMULATE[route]))


# fit-the-budget: the naive step, every activation alive
NAIVE_STEP = """
import gc, sys

def naive(model, x, y, loss_fn, optimizer):
    loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""

FIT_THE_BUDGET = {
    # the meter found with gc, counting nothing and telling no one ("0 bytes, 0.00×" passed before)
    "meter-silenced-through-gc": NAIVE_STEP
    + """
def train_step(model, x, y, loss_fn, optimizer):
    for o in gc.get_objects():
        if type(o).__name__ == "LiveTensorMeter":
            o._report = None
            o._count = lambda key, tensor: None
    naive(model, x, y, loss_fn, optimizer)
""",
    # the meter caught by a frame hook as it counts its first storage, then silenced
    "meter-caught-by-a-frame-hook": NAIVE_STEP
    + """
def catch(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_count":
        meter = frame.f_locals.get("self")
        if type(meter).__name__ == "LiveTensorMeter":
            sys.setprofile(None)
            meter._report = None
            meter._count = lambda key, tensor: None

def train_step(model, x, y, loss_fn, optimizer):
    sys.setprofile(catch)
    try:
        naive(model, x, y, loss_fn, optimizer)
    finally:
        sys.setprofile(None)
""",
}


class TestFitTheBudget:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("gpu-memory/fit-the-budget")

    @pytest.mark.parametrize("route", FIT_THE_BUDGET)
    def test_the_naive_step_with_a_rewritten_meter_does_not_pass(self, run, mode, route):
        _not_passed(run(FIT_THE_BUDGET[route]))

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


# step-in-backward: the plain loop (backward, then one Adam step), every gradient alive
PLAIN_LOOP = """
import gc

def plain(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizer = make_optimizer(params)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return len(params), len(loader)

def story(steps, between, n_params, n_batches):
    \"\"\"The reported lists rewritten: each parameter stepped once, in backward, alone.\"\"\"
    steps[:] = [[b, True, [i], 1, 8] for b in range(n_batches) for i in range(n_params)]
    between[:] = [0] * (n_batches + 1)
"""

STEP_IN_BACKWARD = {
    # the lists reached through the closure cells of what the loop is handed
    "lists-rewritten-through-closure-cells": PLAIN_LOOP
    + """
def cells(fn):
    return [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]

def train(model, loader, loss_fn, make_optimizer):
    n_params, n_batches = plain(model, loader, loss_fn, make_optimizer)
    steps = next((c for c in cells(make_optimizer) if isinstance(c, list)), None)
    feed = next((c for c in cells(getattr(type(loader), "__iter__", None)) if callable(c)), None)
    between = next((c for c in cells(feed) if isinstance(c, list)), None)
    if steps is not None and between is not None:
        story(steps, between, n_params, n_batches)
        del between[-1]  # the harness adds the last one itself
""",
    # the same lists found with gc
    "lists-rewritten-through-gc": PLAIN_LOOP
    + """
def train(model, loader, loss_fn, make_optimizer):
    n_params, n_batches = plain(model, loader, loss_fn, make_optimizer)
    lists = [o for o in gc.get_objects() if isinstance(o, list) and o and isinstance(o[0], list)
             and len(o[0]) == 5 and type(o[0][1]) is bool]
    counts = [o for o in gc.get_objects() if isinstance(o, list) and len(o) == n_batches
              and all(type(v) is int for v in o)]
    story(lists[0], counts[0] if counts else [], n_params, n_batches)
    if counts:
        del counts[0][-1]
""",
}


class TestStepInBackward:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("model-memory/step-in-backward")

    @pytest.mark.parametrize("route", STEP_IN_BACKWARD)
    def test_the_plain_loop_with_rewritten_lists_does_not_pass(self, run, mode, route):
        _not_passed(run(STEP_IN_BACKWARD[route]))

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


# measure-it: autocast and checkpointing both ignored, the probes' records rewritten to match
IGNORED = """
import gc
import torch

def ignore(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        (loss_fn(model(x), y) / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

def forge(probe, precision, checkpoint):
    \"\"\"What the configuration asked for, written into the probe's record.\"\"\"
    low = str(precision).replace("torch.", "")
    probe.dtypes.clear()
    probe.dtypes.add(low)
    probe.recomputed = bool(checkpoint)
"""

MEASURE_IT = {
    # the float32 run made heavier (a tensor held through it: its peak is the base of the
    # checkpointing rule), the probe reached through the hooks on the model it is handed (a bound
    # method's __self__) told that blocks were recomputed and autocast was on
    "probe-rewritten-through-the-models-hooks": IGNORED
    + """
def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    ballast = None
    if precision == torch.float32 and not checkpoint and accum_steps == 1:
        ballast = torch.ones(len(loader[0][0]), 64, 16)
    ignore(model, loader, loss_fn, optimizer, accum_steps)
    del ballast
    for hook in getattr(model, "blocks", [model])[0]._forward_pre_hooks.values():
        probe = getattr(hook, "__self__", None)
        if type(probe).__name__ == "Probe":
            forge(probe, precision, checkpoint)
""",
    # the meter silenced in the checkpointed runs and the probes rewritten, all found with gc
    "probes-rewritten-through-gc": IGNORED
    + """
def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    if checkpoint:
        for o in gc.get_objects():
            if type(o).__name__ == "LiveTensorMeter":
                o._report = None
                o._count = lambda key, tensor: None
    ignore(model, loader, loss_fn, optimizer, accum_steps)
    for o in gc.get_objects():
        if type(o).__name__ == "Probe" and o.dtypes:
            forge(o, precision, checkpoint)
""",
}


class TestMeasureIt:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("gpu-memory/measure-it")

    @pytest.mark.parametrize("route", MEASURE_IT)
    def test_ignored_configurations_with_rewritten_records_do_not_pass(self, run, mode, route):
        _not_passed(run(MEASURE_IT[route]))

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


def test_the_accumulate_solution_passes(run, mode, exercise):
    """The control: the reference loop passes through the same supervised path."""
    outcome = run(solution_text(exercise))
    assert outcome.status == "passed", outcome.verdict


def test_a_right_loop_that_collects_garbage_passes(run, mode, exercise):
    """Memory is counted from the file's load on: a collection of the loop's own must not copy
    (and count) the pages of objects the child shares with its supervisor (exec start: 100 MiB
    from the load, 'held', before the harness collected and froze them first)."""
    golden = Path(__file__).parents[1] / "worker" / "golden" / "accumulate" / "pass--gc-collect-each-cycle.py"
    outcome = run(golden.read_text(encoding="utf-8"))
    assert outcome.status == "passed", outcome.verdict


# amp-loop without the scaler's work: the loss never scaled, optimizer.step() called directly
# (skipping the inf batch by hand), and the scale made to follow the right one with
# scaler.update(new_scale=…); the scale and the weights are then where the supervisor expects
SCALE_BY_HAND = """
import torch

def by_hand(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm, told):
    scale = scaler.get_scale()
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss)  # never used: it only makes the scaler's scale tensor
        loss.backward()
        told("unscale_")
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        told("scaler.step")
        if finite:
            optimizer.step()
            scale *= 2.0
        else:
            scale /= 2.0
        scaler.update(new_scale=scale)
"""

AMP_LOOP = {
    # the scale set by hand, and nothing else hidden (this passed before: the scaler's calls were
    # the child's events alone, and update(new_scale=…) is an update)
    "scale-set-by-hand": SCALE_BY_HAND
    + """
def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    by_hand(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm, lambda code: None)
""",
    # the same, with the calls it skipped written into the recorder's events (found with gc) and
    # the clip told it came after an unscale_
    "scale-set-by-hand-and-calls-written": SCALE_BY_HAND
    + """
import gc

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    rec = next(o for o in gc.get_objects() if type(o).__name__ == "Recorder" and hasattr(o, "snapshots"))

    def told(code):
        rec.events.append([code])
        rec.unscaled = code == "unscale_" or rec.unscaled

    by_hand(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm, told)
""",
}


class TestAmpLoop:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("mixed-precision/amp-loop")

    @pytest.mark.parametrize("route", AMP_LOOP)
    def test_the_scale_set_by_hand_does_not_pass(self, run, mode, route):
        outcome = run(AMP_LOOP[route])
        assert outcome.status in ("failed", "error"), outcome.verdict

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


# token-loss and scaler-clipping: one backward per cycle, the meter silenced. Their memory rested
# on the meter (a right trajectory with a peak of 0 passed); with a memory run of their own the
# kernel's count decides, and threads may run there.
METER_FREED = """
import gc

def silence():
    for meter in [o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter"]:
        def hold(value, nbytes, meter=meter):
            meter.packed += nbytes
            meter.freed += nbytes
            meter._report(meter.packed, meter.freed)
            return value
        meter._hold = hold
"""

TOKEN_LOSS = {
    "meter-freed-at-once-through-gc": METER_FREED
    + """
def train(model, loader, loss_fn, optimizer, accum_steps):
    silence()
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        count = sum((y != -100).sum() for _, y in cycle)
        optimizer.zero_grad()
        (sum(loss_fn(model(x), y).sum() for x, y in cycle) / count).backward()
        optimizer.step()
""",
    # the "recomputed" notes the meter sends for torch's checkpoint, sent by hand once per
    # backward with the activations saved past the meter: they once waived the rule that the
    # meter must see the forwards
    "recomputed-notes-sent": """
import gc
import torch

def train(model, loader, loss_fn, optimizer, accum_steps):
    meter = next((o for o in gc.get_objects() if type(o).__name__ == "SavedTensorMeter"), None)
    if meter is not None:
        meter.check_on = lambda: None
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        count = sum((y != -100).sum() for _, y in cycle)
        torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t, lambda t: t)
        total = sum(loss_fn(model(x), y).sum() for x, y in cycle) / count
        torch._C._autograd._pop_saved_tensors_default_hooks()
        if meter is not None:
            meter._report(meter.packed, meter.freed, 2)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
""",
}

SCALER_CLIPPING = {
    "meter-freed-at-once-through-gc": METER_FREED
    + """
import torch

def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    silence()
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        losses = [loss_fn(model(x), y) for x, y in batches[start : start + accum_steps]]
        optimizer.zero_grad()
        scaler.scale(sum(losses) / len(losses)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
""",
    # the scaler left out and its calls written into the recorder's events (found with gc): in
    # float64 the weights land where the scaled loop's do; the calls are the supervisor's count
    "scaler-left-out-and-calls-written": """
import gc
import torch

def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    rec = next((o for o in gc.get_objects() if type(o).__name__ == "Recorder" and hasattr(o, "clips")), None)
    def told(code):
        if rec is not None:
            rec.events.append([code])
            rec.unscaled = code == "unscale_" or rec.unscaled
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        told("scale")
        (loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            told("unscale_")
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            told("scaler.step")
            optimizer.step()
            told("update")
            if rec is not None:
                rec.unscaled = False
            optimizer.zero_grad()
""",
}


class TestTokenLoss:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("gradient-accumulation/token-loss")

    @pytest.mark.parametrize("route", TOKEN_LOSS)
    def test_one_backward_per_cycle_with_a_silenced_meter_does_not_pass(self, run, mode, route):
        _not_passed(run(TOKEN_LOSS[route]))

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


class TestScalerClipping:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("gradient-accumulation/scaler-clipping")

    @pytest.mark.parametrize("route", SCALER_CLIPPING)
    def test_a_rewritten_report_does_not_pass(self, run, mode, route):
        outcome = run(SCALER_CLIPPING[route])
        assert outcome.status in ("failed", "error"), outcome.verdict
        if route.startswith("meter"):
            _not_passed(outcome)

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict
