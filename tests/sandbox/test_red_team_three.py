"""The third red team's findings (issue 41), closed: each wrong program below passed before and
must not pass now; each right one, written in a style the grader did not expect, must pass.

- chunked-loss runs the learner's loop once, on the wide vocabulary: there is no small run left
  to build the whole logits in. Chunks larger than asked through ``F.linear`` (no hook on
  ``lm_head`` sees them), half again as large (40.5 MiB) or twice with a ballast (58.3), failed
  on the kernel's count until red team 6: a right loop whose cross-entropy is written by hand
  holds more per chunk (up to 52.6 MiB), and the line (72 MiB) now admits it, and them; bytes
  cannot tell the two apart (docs/security.md, chunked-loss).
- find-the-bottleneck: ``zero_grad`` skipped before some steps fails on the parameters the
  supervisor read (the gradient of the batch before carried whole), and the ranges' syncs sent
  by hand, with no ``record_function`` opened, are not ranges.
- amp-loop: a clip written as torch's two public halves (``get_total_norm`` then
  ``clip_grads_with_norm_``) is a clip; a GradScaler whose scale never grows, is pinned to 1, or
  misses its last update (its count forged through the wrapper's closure) fails on the scale the
  supervisor read.

Chunked-loss is graded on memory, which each start counts (conftest's PAIRS); the other two on
Python objects inside the job and the checks, run once per sandbox kind (``ANY_START``).
"""

import pytest

from tests.sandbox.conftest import ANY_START
from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch


def _line(outcome, name):
    """The verdict's line whose name holds ``name``."""
    [line] = [c for c in outcome.verdict["checks"] if name in c["name"]]
    return line


# chunked-loss: lm_head applied through F.linear, so its forward hook never fires
CHUNKED_WRONG = {
    # the whole logits wherever it can: on the first batch only, unhooked (one run: no small
    # run left to tell apart, and its memory is counted over every batch)
    "whole-logits-on-the-first-batch-unhooked": """
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

def train(model, loader, optimizer, chunk_size):
    head = model.lm_head
    for i, (tokens, labels) in enumerate(loader):
        h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
        if i == 0:
            loss = F.cross_entropy(F.linear(h, head.weight, head.bias), y)
        else:
            total = 0
            for s in range(0, len(y), chunk_size):
                total = total + checkpoint(
                    lambda a, b: F.cross_entropy(F.linear(a, head.weight, head.bias), b, reduction="sum"),
                    h[s : s + chunk_size], y[s : s + chunk_size], use_reentrant=False,
                )
            loss = total / (y != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
""",
}

CHUNKED_RIGHT = {
    # each chunk's own backward into detached hidden states, then one backward through the model;
    # the last chunk's logits kept in a variable into the next chunk (one chunk more at the peak)
    "each-chunk-s-own-backward": """
import torch.nn.functional as F

def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        hidden = model.hidden(tokens).flatten(0, 1)
        h = hidden.detach().requires_grad_()
        y = labels.flatten()
        real = (y != -100).sum()
        for start in range(0, y.numel(), chunk_size):
            stop = start + chunk_size
            logits = model.lm_head(h[start:stop])
            part = F.cross_entropy(logits, y[start:stop], reduction="sum", ignore_index=-100)
            (part / real).backward()
        hidden.backward(h.grad)
        optimizer.step()
        optimizer.zero_grad()
""",
    # log_softmax and gather by hand, torch.split, through F.linear (nothing of lm_head's hooked)
    "log-softmax-gather-through-f-linear": """
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

def nll(h, y, weight, bias):
    logp = torch.log_softmax(F.linear(h, weight, bias), dim=-1)
    keep = y != -100
    return -logp[keep].gather(1, y[keep].unsqueeze(1)).sum()

def train(model, loader, optimizer, chunk_size):
    w, b = model.lm_head.weight, model.lm_head.bias
    for tokens, labels in loader:
        h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
        pieces = [checkpoint(nll, hc, yc, w, b, use_reentrant=False)
                  for hc, yc in zip(torch.split(h, chunk_size), torch.split(y, chunk_size))]
        loss = torch.stack(pieces).sum() / (y != -100).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
""",
    # smaller chunks than asked, a logging thread beside the loop
    "half-size-chunks-and-a-logging-thread": """
import queue
import threading
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

def train(model, loader, optimizer, chunk_size):
    lines = queue.Queue()
    writer = threading.Thread(target=lambda: [print(m) for m in iter(lines.get, None)])
    writer.start()
    rows = chunk_size // 2

    def part(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum", ignore_index=-100)

    try:
        for step, (tokens, labels) in enumerate(loader):
            h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
            total = 0.0
            for s in range(0, len(y), rows):
                total = total + checkpoint(part, h[s : s + rows], y[s : s + rows], use_reentrant=False)
            loss = total / (y != -100).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            lines.put(f"batch {step}: {loss.item():.4f}")
    finally:
        lines.put(None)
        writer.join()
""",
}


class TestChunkedLoss:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("long-sequences/chunked-loss")

    @pytest.mark.parametrize("name", CHUNKED_WRONG)
    def test_the_whole_logits_do_not_pass(self, run, mode, start, name):
        outcome = run(CHUNKED_WRONG[name])
        assert outcome.status == "failed", outcome.verdict
        assert _line(outcome, "Parameters")["status"] == "passed", "right numbers: the memory fails it"
        assert _line(outcome, "system")["status"] == "failed", outcome.verdict

    @pytest.mark.parametrize("name", CHUNKED_RIGHT)
    def test_right_loops_in_other_styles_pass(self, run, mode, start, name):
        outcome = run(CHUNKED_RIGHT[name])
        assert outcome.status == "passed", outcome.verdict

    def test_the_solution_passes(self, run, mode, start, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


PHASES_LOOP = """
import torch
from torch.profiler import record_function

def find_bottleneck(model, loader, loss_fn, optimizer):
    spent = {{}}
    batches = iter(loader)
    for i in range(len(loader)):
        for phase in ("data", "forward", "backward", "optimizer"):
            with record_function(phase):
                began = __import__("time").perf_counter()
                if phase == "data":
                    x, y = next(batches)
                elif phase == "forward":
                    loss = loss_fn(model(x), y)
                elif phase == "backward":
                    loss.backward()
                else:
                    optimizer.step()
                    {zero}
            spent[phase] = spent.get(phase, 0.0) + __import__("time").perf_counter() - began
    return max(spent, key=spent.get)
"""

PHASES_WRONG = {
    # the red team's, in another style: zero_grad after every second step
    "zero-grad-every-second-step": PHASES_LOOP.format(zero="if i % 2: optimizer.zero_grad()"),
    # zero_grad every third step, the gradients kept as zeros (set_to_none=False)
    "zero-grad-every-third-step": PHASES_LOOP.format(
        zero="if i % 3 == 2: optimizer.zero_grad(set_to_none=False)"
    ),
    # no record_function: the ranges' edges sent by hand through the patched class's closure
    "edges-sent-by-hand": """
import time
import torch

def find_bottleneck(model, loader, loss_fn, optimizer):
    rf = torch.profiler.record_function
    state = dict(zip(rf._tell.__code__.co_freevars, rf._tell.__closure__))["state"].cell_contents
    send = state["sync"]
    spent = {}
    batches = iter(loader)

    def timed(phase, work):
        began = time.perf_counter()
        send("open:" + phase)
        out = work()
        send("close:" + phase)
        spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - began
        return out

    for _ in range(len(loader)):
        x, y = timed("data", lambda: next(batches))
        loss = timed("forward", lambda: loss_fn(model(x), y))
        timed("backward", loss.backward)
        timed("optimizer", lambda: (optimizer.step(), optimizer.zero_grad()))
    return max(spent, key=spent.get)
""",
}

PHASES_RIGHT = {
    "zero-grad-before-each-backward": PHASES_LOOP.format(zero="pass").replace(
        "loss.backward()", "optimizer.zero_grad(); loss.backward()"
    ),
    # SGD's momentum turned on by hand: each update carries 0.9 of the one before, never all of it
    "momentum-set-by-hand": PHASES_LOOP.format(zero="optimizer.zero_grad()").replace(
        "    spent = {}\n",
        "    spent = {}\n    for group in optimizer.param_groups:\n        group['momentum'] = 0.9\n",
    ),
    # record_function entered and left by hand, and a OneCycleLR (which turns momentum on)
    "ranges-entered-by-hand-and-one-cycle": """
import time
import torch
from torch.autograd.profiler import record_function

def find_bottleneck(model, loader, loss_fn, optimizer):
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.2, total_steps=len(loader))
    spent = {}
    batches = iter(loader)

    def timed(phase, work):
        label = record_function(phase)
        began = time.perf_counter()
        label.__enter__()
        try:
            return work()
        finally:
            label.__exit__(None, None, None)
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - began

    for _ in range(len(loader)):
        x, y = timed("data", lambda: next(batches))
        loss = timed("forward", lambda: loss_fn(model(x), y))
        timed("backward", loss.backward)
        timed("optimizer", lambda: (optimizer.step(), optimizer.zero_grad(set_to_none=True)))
        schedule.step()
    return max(spent, key=spent.get)
""",
}


class TestFindTheBottleneck:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("bottleneck/find-the-bottleneck")

    @ANY_START
    @pytest.mark.parametrize("name", sorted(PHASES_WRONG))
    def test_gradients_carried_or_ranges_forged_do_not_pass(self, run, mode, start, name):
        outcome = run(PHASES_WRONG[name])
        assert outcome.status in ("failed", "error"), outcome.verdict
        if name.startswith("zero-grad"):
            trained = _line(outcome, "trained")
            assert trained["status"] == "failed" and "zero_grad was skipped" in trained["message"], trained
        else:
            assert _line(outcome, "label")["status"] == "failed", outcome.verdict

    @ANY_START
    @pytest.mark.parametrize("name", sorted(PHASES_RIGHT))
    def test_right_loops_in_other_styles_pass(self, run, mode, start, name):
        outcome = run(PHASES_RIGHT[name])
        assert outcome.status == "passed", outcome.verdict

    @ANY_START
    def test_the_solution_passes(self, run, mode, start, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


AMP_SPLIT = """
import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    params = list(model.parameters())
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        {first}
        total = get_total_norm([p.grad for p in params if p.grad is not None]{foreach})
        clip_grads_with_norm_(params, max_norm, total{foreach})
        {second}
        scaler.step(optimizer)
        scaler.update()
"""


class TestAmpLoop:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("mixed-precision/amp-loop")

    @ANY_START
    @pytest.mark.parametrize("foreach", ["", ", foreach=True"])
    def test_a_clip_in_torch_s_two_public_halves_passes(self, run, mode, start, foreach):
        outcome = run(AMP_SPLIT.format(first="scaler.unscale_(optimizer)", second="", foreach=foreach))
        assert outcome.status == "passed", outcome.verdict

    @ANY_START
    def test_the_two_halves_before_unscale_do_not_pass(self, run, mode, start):
        outcome = run(AMP_SPLIT.format(first="", second="scaler.unscale_(optimizer)", foreach=""))
        assert outcome.status == "failed", outcome.verdict


# the scaler's calls all made and counted, its scale not the scaler's own
AMP_SCALE = {
    # growth turned off through the public API: the scale stays at 1,024
    "never-grows": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    scaler.set_growth_factor(1.0)
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
""",
    # no loss scaling at all: the scale pinned to 1 after each forward through load_state_dict
    "pinned-to-one": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        state = scaler.state_dict()
        state["scale"] = 1.0
        scaler.load_state_dict(state)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
""",
    # the last update() left out, its count kept by calling the wrapper's own recorder
    "last-update-counted-by-hand": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    fn = scaler.update.__func__
    told = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))["before"]
    batches = list(loader)
    for i, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        if i < len(batches) - 1:
            scaler.update()
        else:
            told()
""",
}


class TestAmpScale:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("mixed-precision/amp-loop")

    @ANY_START
    @pytest.mark.parametrize("program", AMP_SCALE)
    def test_a_scale_not_the_scaler_s_own_does_not_pass(self, run, mode, start, program):
        outcome = run(AMP_SCALE[program])
        assert outcome.status == "failed", outcome.verdict
        assert _line(outcome, "The scaler's scale")["status"] == "failed", outcome.verdict


class TestForwardCalledDirectly:
    """Each solution with ``model.forward(x)`` for ``model(x)``: a right loop (red team 3, R4
    and R5: amp-loop said the model never ran on batch 1, find-the-bottleneck called it
    interference). The harness hooks the model's first and last layers, which run either way."""

    @pytest.fixture(params=["mixed-precision/amp-loop", "bottleneck/find-the-bottleneck"])
    def exercise(self, request):
        """``run`` grades this exercise in this class."""
        return find_exercise(request.param)

    @ANY_START
    def test_the_solution_calling_forward_passes(self, run, mode, start, exercise):
        code = solution_text(exercise)
        assert code.count("model(x)") == 1
        outcome = run(code.replace("model(x)", "model.forward(x)"))
        assert outcome.status == "passed", outcome.verdict
