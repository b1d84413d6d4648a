"""Red team 6 on chunked-loss: a right loop whose cross-entropy is written by hand, one chunk at a
time (``logsumexp`` minus the label's logit, or a log-softmax by hand and ``gather``), holds more
tensors the size of a chunk's logits than ``F.cross_entropy`` does (``logsumexp`` keeps its input
and output; its backward and ``gather``'s make a few more), yet only one chunk's at a time. On
chunks of 256 rows (16 MiB of logits) such loops rose 84.6-101.0 MiB against a 72 MiB line and
were refused, named ``graph-kept-across-chunks`` (lm_head ran only in forward, as it does where
each chunk runs its own backward). The exercise's chunks are 128 rows now (8 MiB) and the line
8 MiB + 8 chunks' logits (72 MiB): these loops rise 29.3-52.6 MiB, the whole logits alone take
125 MiB, and ``graph-kept-across-chunks`` is named only where the rise reached them.

Each runs once per sandbox kind (the judging is the same under both starts).
"""

import pytest

from tests.sandbox.conftest import ANY_START
from tests.sandbox.course import find_exercise

pytestmark = pytest.mark.slow  # real sandboxes, real torch

# each chunk's own backward into detached hidden states: logsumexp minus the label's logit
LSE_GATHER_EACH_BACKWARD = """
import torch

def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        n = (y != -100).sum()
        hd = h.detach().requires_grad_()
        for start in range(0, len(y), chunk_size):
            hc, yc = hd[start:start + chunk_size], y[start:start + chunk_size]
            logits = model.lm_head(hc).float()
            logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
            nll = -logp.gather(-1, yc.clamp(min=0)[:, None]).squeeze(-1)
            ((nll * (yc != -100)).sum() / n).backward()
        h.backward(hd.grad)
        optimizer.step()
        optimizer.zero_grad()
"""

# a checkpointed chunk, logits by a matmul on lm_head's weight (no hook sees it)
LSE_GATHER_CHECKPOINTED = """
import torch
from torch.utils.checkpoint import checkpoint

def chunk_loss(h, y, W, b):
    logits = h @ W.T + b
    lse = torch.logsumexp(logits, -1)
    picked = logits.gather(-1, y.clamp(min=0)[:, None]).squeeze(-1)
    return ((lse - picked) * (y != -100)).sum()

def train(model, loader, optimizer, chunk_size):
    W, b = model.lm_head.weight, model.lm_head.bias
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        total = sum(checkpoint(chunk_loss, hc, yc, W, b, use_reentrant=False)
                    for hc, yc in zip(h.split(chunk_size), y.split(chunk_size)))
        (total / (y != -100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
"""

# the same hand-written loss on the whole logits at once
WHOLE_LOGITS_BY_HAND = """
import torch

def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        logits = model.lm_head(h)
        lse = torch.logsumexp(logits, -1)
        picked = logits.gather(-1, y.clamp(min=0)[:, None]).squeeze(-1)
        (((lse - picked) * (y != -100)).sum() / (y != -100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
"""

# the hand-written loss of every chunk kept for one backward
EVERY_CHUNK_KEPT_BY_HAND = """
import torch

def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        total = 0
        for hc, yc in zip(h.split(chunk_size), y.split(chunk_size)):
            logits = model.lm_head(hc)
            lse = torch.logsumexp(logits, -1)
            picked = logits.gather(-1, yc.clamp(min=0)[:, None]).squeeze(-1)
            total = total + ((lse - picked) * (yc != -100)).sum()
        (total / (y != -100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def _line(outcome, name):
    [line] = [c for c in outcome.verdict["checks"] if name in c["name"]]
    return line


@pytest.fixture
def exercise():
    """``run`` grades this exercise here."""
    return find_exercise("long-sequences/chunked-loss")


@ANY_START
@pytest.mark.parametrize(
    "code", [LSE_GATHER_EACH_BACKWARD, LSE_GATHER_CHECKPOINTED], ids=["each-backward", "checkpointed"]
)
def test_a_cross_entropy_written_by_hand_per_chunk_passes(run, mode, start, code):
    outcome = run(code)
    assert outcome.status == "passed", outcome.verdict


@ANY_START
def test_the_whole_logits_by_hand_do_not_pass(run, mode, start):
    outcome = run(WHOLE_LOGITS_BY_HAND)
    assert outcome.status == "failed", outcome.verdict
    assert _line(outcome, "Parameters")["status"] == "passed", "right numbers: the memory fails it"
    assert _line(outcome, "system")["status"] == "failed", outcome.verdict
    assert outcome.verdict["diagnosis"]["id"] == "whole-logits-built"


@ANY_START
def test_every_chunk_s_graph_kept_by_hand_does_not_pass_and_is_named(run, mode, start):
    outcome = run(EVERY_CHUNK_KEPT_BY_HAND)
    assert outcome.status == "failed", outcome.verdict
    assert _line(outcome, "system")["status"] == "failed", outcome.verdict
    assert outcome.verdict["diagnosis"]["id"] == "graph-kept-across-chunks"
