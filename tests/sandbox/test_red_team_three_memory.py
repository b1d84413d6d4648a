"""Red team 3 (issue 41), memory and loaders: fit-the-budget's and input-pipeline's routes.

fit-the-budget: a pass on memory rests on the kernel's count of the process, from a floor the
learner's code cannot lower. The naive step that frees, during each step, the harness's own wide
weights (the release run's, found up the call stack) and writes them back from their seed after
it, lowered that floor by 36 MiB; now those weights do not exist in the child while the budget's
run is measured. Two segments, recomputed in buffers the meter cannot see, with a ballast freed as
each step begins, stayed under the line from the file's load; that line is tighter now (``HELD``).
Right steps in other styles still pass.

input-pipeline: the learner's own function (a ``worker_init_fn``, a ``collate_fn``) under a spawn
or forkserver context imports in the worker (the file is importable as ``submission``), and a
loader whose workers did load in parallel, as the supervisor's item server saw, is never told it
is serial. Every program runs under both starts (conftest's PAIRS).
"""

import pytest

from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch


def _memory_failed(outcome):
    """Not a pass, and the budget's line as the kernel counted it failed."""
    assert outcome.status == "failed", outcome.verdict
    kernel = [c for c in outcome.verdict["checks"] if c["name"] == "Peak memory, as the system counted it"]
    assert kernel and kernel[0]["status"] == "failed", outcome.verdict


# the naive step; its activations in buffers the meter cannot see; the release run's 36 MiB of
# weights freed during each step and written back, bit for bit, from their seed after it
NAIVE_FREES_THE_HARNESS = '''
# fit-the-budget: the naive step (mistake over-budget: no checkpointing, every activation kept), passed by
# (a) activations in buffers the live-tensor meter cannot see (torch.empty(0).resize_() + out= ops, kept on a
#     custom autograd.Function's ctx; a hand-written backward), and
# (b) freeing, during each step, 36 MiB of the harness's own memory that the supervisor counted at
#     "watch-memory": the release run's wide weights (found up the call stack), then writing them back at
#     the step's end, bit for bit, from their seed (in place, unseen by the meter). The step never changes
#     with the
#     run it is in; it only leaves alone the model it is training.
import math
import sys
import torch


def _hidden(shape, dtype):
    buf = torch.empty(0, dtype=dtype)
    buf.resize_(*shape)
    return buf


class HiddenBlock(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, *wb):
        acts, h = [x], x
        for k in range(0, len(wb), 2):
            w, b = wb[k], wb[k + 1]
            out = _hidden((h.shape[0], w.shape[0]), h.dtype)
            torch.addmm(b, h, w.t(), out=out)
            torch.tanh(out, out=out)
            acts.append(out)
            h = out
        ctx.acts, ctx.wb = acts, wb
        return h.view_as(h)

    @staticmethod
    def backward(ctx, g):
        acts, wb = ctx.acts, ctx.wb
        grads = [None] * len(wb)
        for k in range(len(wb) // 2 - 1, -1, -1):
            w, t, inp = wb[2 * k], acts[k + 1], acts[k]
            da = torch.ops.aten.tanh_backward(g, t)
            grads[2 * k] = da.t().mm(inp)
            grads[2 * k + 1] = da.sum(0)
            g = da.mm(w)
            acts[k + 1] = None
            del da, t
        ctx.acts = None
        return (g, *grads)


def _params(block):
    return [p for lin in block if isinstance(lin, torch.nn.Linear) for p in (lin.weight, lin.bias)]


_state = {}


def _victim():
    if "victim" not in _state:
        f = sys._getframe(1)
        while f is not None:
            rel = f.f_locals.get("release")
            if isinstance(rel, tuple) and rel and isinstance(rel[0], torch.nn.Module):
                _state["victim"] = rel[0]
                break
            f = f.f_back
        else:
            _state["victim"] = None
    return _state["victim"]


def _free(victim):
    for block in victim.blocks:
        for lin in block:
            if isinstance(lin, torch.nn.Linear):
                lin.weight.data = torch.empty(0, dtype=torch.float64)


def _restore(victim):
    """The wide weights as block_net(seed 2) made them: drawn in float32 in construction order, cast."""
    rng = torch.get_rng_state()
    torch.manual_seed(2)
    for block in victim.blocks:
        for lin in block:
            if isinstance(lin, torch.nn.Linear):
                n = lin.bias.shape[0]
                w32 = _hidden((n, n), torch.float32)
                torch.nn.init.kaiming_uniform_(w32, a=math.sqrt(5))
                b32 = _hidden((n,), torch.float32)
                bound = 1 / math.sqrt(n)
                torch.nn.init.uniform_(b32, -bound, bound)
                w64 = _hidden((n, n), torch.float64)
                w64.copy_(w32)
                lin.weight.data = w64
    torch.set_rng_state(rng)


def train_step(model, x, y, loss_fn, optimizer):
    victim = _victim()
    spare = victim is not None and victim is not model
    if spare:
        _free(victim)
    for block in model.blocks:
        x = HiddenBlock.apply(x, *_params(block))
    loss = loss_fn(model.head(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if spare:
        _restore(victim)
'''

# the same naive step, the harness's tensors found with gc instead: every float64 parameter of
# 250,000 values or more that is not its own model's is emptied during the step and refilled after
NAIVE_FREES_THROUGH_GC = """
import gc
import torch


def _others(model):
    mine = {id(p) for p in model.parameters()}
    return [
        o for o in gc.get_objects()
        if isinstance(o, torch.nn.Parameter) and id(o) not in mine and o.dtype == torch.float64
        and o.numel() >= 250_000
    ]


def train_step(model, x, y, loss_fn, optimizer):
    others = _others(model)
    kept = [(p, p.data.shape) for p in others]
    for p in others:
        p.data = torch.empty(0, dtype=torch.float64)  # the values come back from the seed below
    loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state = torch.get_rng_state()
    torch.manual_seed(2)
    for p, shape in kept:
        p.data = torch.empty(shape, dtype=torch.float64)
        torch.nn.init.kaiming_uniform_(p.data, a=5 ** 0.5)
    torch.set_rng_state(state)
"""

# two segments of three blocks, recomputed in meter-blind buffers, and a 6 MiB ballast freed as
# each step begins
TWO_SEGMENTS_AND_A_BALLAST = """
# fit-the-budget: over-budget -- checkpointed in 2 segments of 3 blocks, whose recomputation holds 3 blocks'
# activations at once: the live-tensor meter reads it at 0.72x the naive step (budget 0.65x), while the
# kernel's line at a batch of 24,000 lets it through (0.63x). The segments' recomputation is done in
# buffers the meter never counts: torch.empty(0).resize_() (in place: "aliases its input"), filled with out=
# ops and kept on ctx attributes of a custom autograd.Function with a hand-written backward. Public API only.
# Plus a 6 MiB ballast held between calls (made in place, unseen by the meter), freed as each step begins.
import torch


def _hidden(rows, cols, like):
    buf = torch.empty(0, dtype=like.dtype)
    buf.resize_(rows, cols)
    return buf


def _forward(x, wb):
    acts, h = [x], x
    for k in range(0, len(wb), 2):
        w, b = wb[k], wb[k + 1]
        out = _hidden(h.shape[0], w.shape[0], h)
        torch.addmm(b, h, w.t(), out=out)
        torch.tanh(out, out=out)
        acts.append(out)
        h = out
    return acts


class HiddenSegment(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, *wb):
        ctx.x, ctx.wb = x, wb          # only the segment's input is kept, as checkpoint does
        return _forward(x, wb)[-1].view(x.shape[0], -1)

    @staticmethod
    def backward(ctx, g):
        wb = ctx.wb
        acts = _forward(ctx.x, wb)     # recomputed, unseen by the meter
        grads = [None] * len(wb)
        for k in range(len(wb) // 2 - 1, -1, -1):
            w, t, inp = wb[2 * k], acts[k + 1], acts[k]
            da = torch.ops.aten.tanh_backward(g, t)
            grads[2 * k] = da.t().mm(inp)
            grads[2 * k + 1] = da.sum(0)
            g = da.mm(w)
            acts[k + 1] = None
        ctx.x = None
        return (g, *grads)


def segment_params(blocks):
    return [p for block in blocks for lin in block if isinstance(lin, torch.nn.Linear)
            for p in (lin.weight, lin.bias)]


_ballast = []


def train_step(model, x, y, loss_fn, optimizer):
    _ballast.clear()
    blocks = list(model.blocks)
    for seg in (blocks[:3], blocks[3:]):
        x = HiddenSegment.apply(x, *segment_params(seg))
    loss = loss_fn(model.head(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    b = torch.empty(0, dtype=torch.float64)
    b.resize_(6 << 17)
    b.fill_(1.0)
    _ballast.append(b)
"""

# right, in styles of their own: checkpoint_sequential then a collection; a block at a time
# through a function of the learner's, the gradients set to None by hand
SEQUENTIAL_THEN_GC = """
import gc
import torch
from torch.utils.checkpoint import checkpoint_sequential


def train_step(model, x, y, loss_fn, optimizer):
    h = checkpoint_sequential(torch.nn.Sequential(*model.blocks), 6, x, use_reentrant=False)
    loss = loss_fn(model.head(h), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
"""

BLOCK_BY_BLOCK = """
from torch.utils.checkpoint import checkpoint


def run_block(block, h):
    return block(h)


def train_step(model, x, y, loss_fn, optimizer):
    h = x
    for block in model.blocks:
        h = checkpoint(run_block, block, h, use_reentrant=False)
    loss_fn(model.head(h), y).backward()
    optimizer.step()
    for p in model.parameters():
        p.grad = None
"""


class TestFitTheBudget:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("gpu-memory/fit-the-budget")

    @pytest.mark.parametrize(
        "code",
        [NAIVE_FREES_THE_HARNESS, NAIVE_FREES_THROUGH_GC, TWO_SEGMENTS_AND_A_BALLAST],
        ids=["naive-frees-the-harness", "naive-frees-through-gc", "two-segments-and-a-ballast"],
    )
    def test_over_the_budget_does_not_pass(self, run, mode, code):
        _memory_failed(run(code))

    @pytest.mark.parametrize(
        "code",
        ["solution", SEQUENTIAL_THEN_GC, BLOCK_BY_BLOCK],
        ids=["solution", "sequential-then-gc", "block-by-block"],
    )
    def test_right_steps_pass(self, run, mode, exercise, code):
        outcome = run(solution_text(exercise) if code == "solution" else code)
        assert outcome.status == "passed", outcome.verdict


# input-pipeline: workers started fresh, with functions of the learner's or without
FORKSERVER_WITH_INIT = """
import torch
from torch.utils.data import DataLoader


def init(worker_id):
    torch.set_num_threads(1)


def make_loader(dataset, batch_size):
    return DataLoader(
        dataset, batch_size=batch_size, num_workers=2, multiprocessing_context="forkserver",
        worker_init_fn=init, generator=torch.Generator().manual_seed(0),
    )
"""

SPAWN_WITH_COLLATE = """
import torch
from torch.utils.data import DataLoader


def collate(items):
    return torch.stack([x for x, _ in items]), torch.tensor([i for _, i in items])


def make_loader(dataset, batch_size):
    return DataLoader(
        dataset, batch_size=batch_size, num_workers=2, multiprocessing_context="spawn",
        persistent_workers=True, collate_fn=collate,
    )
"""

FORKSERVER_PLAIN = """
from torch.utils.data import DataLoader


def make_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, num_workers=2, multiprocessing_context="forkserver")
"""


class TestInputPipeline:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("bottleneck/input-pipeline")

    @pytest.mark.parametrize(
        "code",
        [FORKSERVER_WITH_INIT, SPAWN_WITH_COLLATE, FORKSERVER_PLAIN],
        ids=["forkserver-with-init", "spawn-with-collate", "forkserver-plain"],
    )
    def test_workers_started_fresh_run_and_are_not_called_serial(self, run, mode, code):
        """Their batches are right; slow to start on a busy machine, they may miss the speed-up,
        but then the verdict says that their loading was parallel."""
        outcome = run(code)
        assert outcome.status in ("passed", "failed"), outcome.verdict
        checks = {c["name"]: c["status"] for c in outcome.verdict["checks"]}
        assert checks.get("Batches") == "passed", outcome.verdict
        if outcome.status == "failed":
            assert outcome.verdict["diagnosis"]["id"] == "slow-start", outcome.verdict

    def test_one_worker_is_still_serial(self, run, mode):
        outcome = run(
            "from torch.utils.data import DataLoader\n\n\n"
            "def make_loader(dataset, batch_size):\n"
            "    return DataLoader(dataset, batch_size=batch_size, num_workers=1)\n"
        )
        assert outcome.status == "failed", outcome.verdict
        assert outcome.verdict["diagnosis"]["id"] == "still-serial", outcome.verdict
