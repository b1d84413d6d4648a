"""Forged probes (issue 41, class 2): wrong loops whose records in the learner's process (the
steps and gradients step-in-backward's harness lists, the dtypes measure-it's probe collects) are
rewritten from inside: from a thread, through ``gc`` or closure cells, by a frame hook
(``sys.settrace``, ``sys.setprofile``), on the probe's class in its module; or that tell one run
from another (a layer's width, a batch's size, a count of calls). None may pass, and each is
failed by a line that rests on what the supervisor or the kernel observed: step-in-backward's
parameters, read after every batch (``harness.hookstep.Sampled``), or its memory as the kernel
counted it; measure-it's parameters after each configuration, against float32's and autocast's
arithmetic recomputed by the checks. The exercises' solutions pass through the same path.

step-in-backward's programs run under both starts (conftest's PAIRS): their memory is counted by
each. measure-it's are judged on parameters, the same under both: they run once per sandbox kind
(``ANY_START``).
"""

from pathlib import Path

import pytest

from tests.sandbox.conftest import ANY_START
from tests.sandbox.course import find_exercise

pytestmark = pytest.mark.slow  # real sandboxes, real torch


def _failed_on(outcome, observed):
    """Not a pass; and where the loop ran to its verdict (not an error), one of the lines named in
    ``observed`` (those that rest on what the supervisor or the kernel saw) failed."""
    assert outcome.status in ("failed", "error"), outcome.verdict
    if outcome.status == "failed":
        failed = {c["name"] for c in outcome.verdict["checks"] if c["status"] == "failed"}
        assert failed & observed, outcome.verdict


# step-in-backward: each loop wrong on the model it is graded on (every gradient alive at once, or
# the weights left untrained in the last batch), its records rewritten where it can reach them
STEP_IN_BACKWARD = {
    "plain-loop-lists-rewritten-from-a-thread": """
import gc, threading, time

def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizer = make_optimizer(params)
    done = threading.Event()

    def forge():
        while not done.is_set():
            for o in gc.get_objects():
                if isinstance(o, list) and o and isinstance(o[0], list) and len(o[0]) == 5:
                    for step in o:
                        step[1], step[3] = True, min(step[3], 1)
            time.sleep(0.001)

    t = threading.Thread(target=forge, daemon=True)
    t.start()
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    done.set()
    t.join()
""",
    "steps-fixed-by-sys-settrace": """
import sys

def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = [make_optimizer([p]) for p in params]

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "recorded":
            return local
        return None

    def local(frame, event, arg):
        if event == "return":
            steps = frame.f_locals.get("steps")
            if isinstance(steps, list) and steps:
                steps[-1][1], steps[-1][3], steps[-1][2] = True, 1, steps[-1][2][:1]
        return local

    sys.settrace(tracer)
    try:
        for x, y in loader:
            loss_fn(model(x), y).backward()
            for o in optimizers:
                o.step()
            for p in params:
                p.grad = None
    finally:
        sys.settrace(None)
""",
    "plain-loop-records-split-by-sys-setprofile": """
# the plain loop, its parameters rewritten after each backward to the plain loop's own values (no
# change: the maths are right), the steps' records fixed as the harness's wrapper returns
import sys

def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizer = make_optimizer(params)

    def profile(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "recorded":
            steps = frame.f_locals.get("steps")
            if isinstance(steps, list) and steps:
                last = steps.pop()
                steps.extend([last[0], True, [i], 1, 8] for i in range(len(params)))

    sys.setprofile(profile)
    try:
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    finally:
        sys.setprofile(None)
""",
    "weights-frozen-in-the-last-batch-lists-rewritten-through-a-closure": """
# each parameter stepped in its hook, but in the last batch the weights are frozen and only the
# biases train (no weight gradient at all: less memory); the lists rewritten to match a right loop
def cells(fn):
    return [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]

def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = {p: make_optimizer([p]) for p in params}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(step_now)
    n = len(loader)
    for i, (x, y) in enumerate(loader):
        if i == n - 1:
            for p in params:
                if p.dim() > 1:
                    p.requires_grad_(False)
        loss_fn(model(x), y).backward()
    steps = next((c for c in cells(make_optimizer) if isinstance(c, list)), None)
    if steps is not None:
        steps[:] = [[b, True, [i], 1, 8] for b in range(n) for i in range(len(params))]
""",
    "plain-loop-where-the-layers-are-wide": """
# the plain loop where the layers are wide, the hooks elsewhere; the lists found with gc rewritten
import gc

def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    if params[0].shape[0] > 100:
        optimizer = make_optimizer(params)
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        for o in gc.get_objects():
            if isinstance(o, list) and o and isinstance(o[0], list) and len(o[0]) == 5:
                o[:] = [[b, True, [i], 1, 8] for b in range(len(loader)) for i in range(len(params))]
            elif isinstance(o, list) and len(o) == len(loader) and all(type(v) is int for v in o):
                o[:] = [0] * len(o)
        return
    optimizers = {p: make_optimizer([p]) for p in params}
    for p in params:
        p.register_post_accumulate_grad_hook(lambda q: (optimizers[q].step(), setattr(q, "grad", None)))
    for x, y in loader:
        loss_fn(model(x), y).backward()
""",
    "every-gradient-stashed-on-the-first-call": """
# every gradient stashed and stepped in the last hook on the first call (the lists see one .grad
# at a time), the solution's hooks on any later call
calls = []

def train(model, loader, loss_fn, make_optimizer):
    calls.append(1)
    params = list(model.parameters())
    optimizers = {p: make_optimizer([p]) for p in params}
    if len(calls) == 1:
        stash = {}

        def hook(p):
            stash[p] = p.grad
            p.grad = None
            if len(stash) == len(params):
                for q in params:
                    q.grad = stash.pop(q)
                    optimizers[q].step()
                    q.grad = None
    else:
        def hook(p):
            optimizers[p].step()
            p.grad = None
    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    for x, y in loader:
        loss_fn(model(x), y).backward()
""",
}

# the lines of step-in-backward that rest on the supervisor's and the kernel's observations
STEP_OBSERVED = {"Parameters after each batch", "Gradients alive, as the system counted them"}


class TestStepInBackward:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("model-memory/step-in-backward")

    @pytest.mark.parametrize("route", STEP_IN_BACKWARD)
    def test_a_wrong_loop_with_forged_records_does_not_pass(self, run, mode, route):
        _failed_on(run(STEP_IN_BACKWARD[route]), STEP_OBSERVED)

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(Path(exercise.path, "solution.py").read_text(encoding="utf-8"))
        assert outcome.status == "passed", outcome.verdict


# measure-it: autocast ignored where no memory run is (or used where float32 was asked), the
# probes' dtypes rewritten to what each configuration asked for
MEASURE_IT = {
    "autocast-off-where-accumulating-probes-rewritten-through-gc": """
# autocast ignored wherever micro-batches are accumulated ("all": no memory run there), the
# probes' records rewritten through gc to the dtype each configuration asked for
import gc
import torch
from torch.utils.checkpoint import checkpoint as recompute


def forward(model, x, use_checkpoint):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if use_checkpoint else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    on = precision != torch.float32 and accum_steps == 1
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        with torch.autocast(x.device.type, dtype=precision, enabled=on):
            loss = loss_fn(forward(model, x, checkpoint), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    low = str(precision).replace("torch.", "")
    for o in gc.get_objects():
        if type(o).__name__ == "Probe" and o.dtypes:
            o.dtypes.clear()
            o.dtypes.add(low)
""",
    "autocast-always-on-probe-reached-through-the-models-hooks": """
# autocast always on, float32 asked or not (the float32 runs compute in bfloat16), the probe
# reached through the hooks on the model it is handed and told float32 where float32 was asked
import torch
from torch.utils.checkpoint import checkpoint as recompute


def forward(model, x, use_checkpoint):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if use_checkpoint else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        big = len(x) > 1000  # the memory runs: as asked there
        on = precision != torch.float32 or not big
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=on):
            loss = loss_fn(forward(model, x, checkpoint), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    asked = str(precision).replace("torch.", "")
    for module in model.modules():  # a bound method, or a partial of one
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]:
            probe = getattr(getattr(hook, "func", hook), "__self__", None)
            if type(probe).__name__ == "Probe":
                probe.dtypes.clear()
                probe.dtypes.add(asked)
""",
    "autocast-only-on-the-large-batch-probe-caught-by-sys-setprofile": """
# autocast ignored except on the memory runs' large batch, the probe's records caught by a frame
# hook as its forward hook returns and set to the dtype asked
import sys
import torch
from torch.utils.checkpoint import checkpoint as recompute

asked = ["float32"]


def profile(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "_linear":
        probe = frame.f_locals.get("self")
        if type(probe).__name__ == "Probe":
            probe.dtypes.clear()
            probe.dtypes.add(asked[0])


def forward(model, x, use_checkpoint):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if use_checkpoint else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    asked[0] = str(precision).replace("torch.", "")
    sys.setprofile(profile)
    try:
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(loader, start=1):
            on = precision != torch.float32 and len(x) > 1000
            with torch.autocast(x.device.type, dtype=precision, enabled=on):
                loss = loss_fn(forward(model, x, checkpoint), y)
            (loss / accum_steps).backward()
            if i % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    finally:
        sys.setprofile(None)
""",
    "autocast-only-on-the-large-batch-probe-class-patched": """
# the probe's class patched in its module to record the dtype each call asks for; autocast never
# used but on the memory runs' large batch
import sys
import torch
from torch.utils.checkpoint import checkpoint as recompute

asked = ["float32"]
probe_class = sys.modules["harness.measure"].Probe


def _linear(self, module, args, out):
    self.dtypes.add(asked[0])
    self.weights.add("float32")


probe_class._linear = _linear


def forward(model, x, use_checkpoint):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if use_checkpoint else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    asked[0] = str(precision).replace("torch.", "")
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        on = precision != torch.float32 and len(x) > 1000
        with torch.autocast(x.device.type, dtype=precision, enabled=on):
            loss = loss_fn(forward(model, x, checkpoint), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
""",
    "autocast-off-where-accumulating-probes-rewritten-from-a-thread": """
# autocast ignored in "all"; a thread rewrites the probes' records while the loop runs
import gc, threading, time
import torch
from torch.utils.checkpoint import checkpoint as recompute


def forward(model, x, use_checkpoint):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if use_checkpoint else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    low = str(precision).replace("torch.", "")
    done = threading.Event()

    def forge():
        while not done.is_set():
            for o in gc.get_objects():
                if type(o).__name__ == "Probe" and o.dtypes:
                    o.dtypes.clear()
                    o.dtypes.add(low)
            time.sleep(0.001)

    t = threading.Thread(target=forge, daemon=True)
    t.start()
    on = precision != torch.float32 and accum_steps == 1
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        with torch.autocast(x.device.type, dtype=precision, enabled=on):
            loss = loss_fn(forward(model, x, checkpoint), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    done.set()
    t.join()
""",
}


class TestMeasureIt:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("gpu-memory/measure-it")

    @ANY_START
    @pytest.mark.parametrize("route", MEASURE_IT)
    def test_a_configuration_in_the_wrong_precision_with_forged_dtypes_does_not_pass(
        self, run, mode, start, route
    ):
        outcome = run(MEASURE_IT[route])
        _failed_on(outcome, {"Autocast where asked"})
        if outcome.status == "failed":  # failed on the parameters, not on the forged dtypes
            line = next(c for c in outcome.verdict["checks"] if c["name"] == "Autocast where asked")
            assert "your parameters ended" in line["message"], line

    @ANY_START
    def test_the_solution_passes(self, run, mode, start, exercise):
        outcome = run(Path(exercise.path, "solution.py").read_text(encoding="utf-8"))
        assert outcome.status == "passed", outcome.verdict
