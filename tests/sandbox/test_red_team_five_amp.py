"""The fifth red team's amp-loop findings (issue 41), closed.

- R4: a right loop with forwards that only look (the starting loss of every batch printed under
  ``no_grad`` first, a loss logged after each step, a warm-up pass, a float32 look) was refused
  with three false claims: the first forward of each batch stood for it. The readings before a
  batch are now the supervisor's at the forward that batch trained on (a backward reached it);
  which one that is comes with the child's record and only chooses among the supervisor's
  readings, so forged marks (rewritten through gc) pass nothing.
- R5: clipping the still-scaled gradients at ``max_norm * scaler.get_scale()`` without
  ``unscale_`` is not the order the exercise asks for; it fails, named
  ``clip-on-scaled-gradients``, whose text claims no wrong cut (the weights disprove one).

Right loops and one wrong one under every (sandbox, start) pair; the rest once per kind.
"""

import pytest

from tests.sandbox.conftest import ANY_START
from tests.sandbox.course import find_exercise

pytestmark = pytest.mark.slow  # real sandboxes, real torch

STEP = """
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
"""

RIGHT = {
    # the red team's R4: every batch's starting loss, printed, before the loop
    "eval-first": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
        print([float(loss_fn(model(x), y)) for x, y in loader])
    for x, y in loader:"""
    + STEP,
    # a look in float32 (no autocast) before each training forward, and one after each step
    "float32-looks-around-each-step": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        with torch.no_grad():
            print("before", loss_fn(model(x), y).item())"""
    + STEP
    + """
        with torch.inference_mode():
            print("after", loss_fn(model(x), y).item())
""",
}

WRONG = {
    # float32 training forwards, autocast looks: the trained forwards' dtypes count
    "float32-training-autocast-looks": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
            loss_fn(model(x), y)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
""",
    # looks at the starting weights, then every mark forged through gc so that the looks stand
    # for the batches, on a loop whose scale never grows
    "marks-forged-through-gc": """
import gc
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    scaler.set_growth_factor(1.0)
    with torch.no_grad(), torch.autocast(device_type, dtype=amp_dtype):
        [loss_fn(model(x), y) for x, y in loader]
    for x, y in loader:"""
    + STEP
    + """
    for rec in [o for o in gc.get_objects() if type(o).__name__ == "Recorder"]:
        for shot in rec.snapshots:
            shot["trained"] = shot["grad"] = not shot["trained"]
""",
    # a warm-up that updates: batch 1 trained on twice
    "warm-up-step": """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    batches = list(loader)
    for x, y in batches[:1] + batches:"""
    + STEP,
}

SCALED_CLIP = """
import torch

def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.fixture
def exercise():
    """``run`` grades this exercise."""
    return find_exercise("mixed-precision/amp-loop")


def test_the_red_team_s_eval_first_passes_under_every_start(run, mode, start):
    outcome = run(RIGHT["eval-first"])
    assert outcome.status == "passed", outcome.verdict


def test_float32_training_behind_autocast_looks_fails_under_every_start(run, mode, start):
    outcome = run(WRONG["float32-training-autocast-looks"])
    assert outcome.status == "failed", outcome.verdict
    assert outcome.verdict["diagnosis"]["id"] == "no-autocast", outcome.verdict


@ANY_START
@pytest.mark.parametrize("program", ["float32-looks-around-each-step"])
def test_a_right_loop_with_looks_passes(run, mode, start, program):
    outcome = run(RIGHT[program])
    assert outcome.status == "passed", outcome.verdict


@ANY_START
@pytest.mark.parametrize("program", ["marks-forged-through-gc", "warm-up-step"])
def test_a_wrong_loop_with_looks_does_not_pass(run, mode, start, program):
    outcome = run(WRONG[program])
    assert outcome.status in ("failed", "error"), outcome.verdict


@ANY_START
def test_a_clip_on_scaled_gradients_fails_without_claiming_a_wrong_cut(run, mode, start):
    outcome = run(SCALED_CLIP)
    assert outcome.status == "failed", outcome.verdict
    diagnosis = outcome.verdict["diagnosis"]
    assert diagnosis["id"] == "clip-on-scaled-gradients", outcome.verdict
    assert "too much" not in diagnosis["explanation"]
    assert "follow the instructor's loop" in diagnosis["explanation"]
