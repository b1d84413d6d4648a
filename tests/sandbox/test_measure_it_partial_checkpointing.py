"""measure-it: checkpointing asked, only some blocks checkpointed (a route where a wrong loop passed).

The prompt asks to checkpoint each of ``model.blocks``. Before, a loop that checkpointed every
other block passed (the kernel's rise 0.39× in "all", line 0.45×, right 0.32×; 0.72× in
"checkpoint", line 0.8×, right 0.54-0.65×): no line leaves both sides 0.05× there. Leaving the
last block out changes nothing the kernel sees (0.32× and 0.57×, as the solution): its
recomputation would run as soon as backward begins, so it saves nothing, and torch's
``checkpoint_sequential`` runs its last segment plain; the prompt says so, and that loop passes.
Now the probe's hooks on each block (the harness's, in the learner's process) report which blocks
ran again during backward, and a checkpointed configuration with a block before the last never
recomputed fails. That count is the child's word: it can fail a loop, never pass one (a program
that rewrites it is the class of the probe's flags set through ``gc``, red team 4: the memory runs
still hold what it saves).
"""

import pytest

from tests.sandbox.conftest import ANY_START
from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch

LOOP = """
import torch
from torch.utils.checkpoint import checkpoint as recompute


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        with torch.autocast(x.device.type, dtype=precision, enabled=precision != torch.float32):
            h = x
            for n, block in enumerate(model.blocks):
                h = recompute(block, h, use_reentrant=False) if checkpoint and {which} else block(h)
            loss = loss_fn(model.head(h), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
"""

PARTIAL = {  # style: which blocks it checkpoints, the blocks it leaves out before the last
    "every-other-block": ("n % 2 == 0", "block 2 of 4"),
    "only-the-first-block": ("n == 0", "blocks 2, 3 of 4"),
    "all-but-the-second": ("n != 1", "block 2 of 4"),
}


@pytest.fixture
def exercise():
    """``run`` grades this exercise here."""
    return find_exercise("gpu-memory/measure-it")


def _line(outcome, name):
    return next(c for c in outcome.verdict["checks"] if name in c["name"])


@ANY_START
@pytest.mark.parametrize("style", list(PARTIAL))
def test_some_blocks_left_out_of_checkpointing_do_not_pass(run, mode, start, style):
    which, left = PARTIAL[style]
    outcome = run(LOOP.format(which=which))
    assert outcome.status == "failed", outcome.verdict
    line = _line(outcome, "Checkpointing lowers the peak")
    assert line["status"] == "failed" and left in line["message"], outcome.verdict
    assert outcome.verdict["diagnosis"] is None  # not "checkpoint-ignored": it checkpointed some


@ANY_START
@pytest.mark.parametrize("code", ["solution", "all-but-the-last"])
def test_every_block_checkpointed_passes_the_last_one_optional(run, mode, start, exercise, code):
    text = solution_text(exercise) if code == "solution" else LOOP.format(which="n < len(model.blocks) - 1")
    outcome = run(text)
    assert outcome.status == "passed", outcome.verdict
