"""Three ways to get chunks wrong: averaging the chunks' means changes the loss and the gradients
when a chunk holds fewer real tokens; splitting lm_head(hidden) builds a tokens x vocabulary tensor
that chunking the hidden states never builds; and without checkpoint, the chunks' saved
log-softmaxes add up to the whole logits."""

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

n, d, v, rows = 600, 16, 300, 200
torch.manual_seed(0)
lm_head = torch.nn.Linear(d, v, bias=False)
hidden = torch.randn(n, d, requires_grad=True)
labels = torch.randint(0, v, (n,))
labels[-150:] = -100  # the last chunk holds 50 real tokens, the others 200


class Shapes(TorchDispatchMode):
    """The shape of every tensor an op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.shapes.append(tuple(out.shape))
        return out


def chunk_loss(h, y):
    return F.cross_entropy(lm_head(h), y, reduction="sum", ignore_index=-100)


def right():
    total = sum(
        checkpoint(chunk_loss, hc, yc, use_reentrant=False)
        for hc, yc in zip(hidden.split(rows), labels.split(rows), strict=True)
    )
    return total / (labels != -100).sum()


def mean_of_means():
    means = [
        F.cross_entropy(lm_head(hc), yc, ignore_index=-100)
        for hc, yc in zip(hidden.split(rows), labels.split(rows), strict=True)
    ]
    return sum(means) / len(means)


def split_logits():
    logits = lm_head(hidden)
    total = sum(
        F.cross_entropy(lc, yc, reduction="sum", ignore_index=-100)
        for lc, yc in zip(logits.split(rows), labels.split(rows), strict=True)
    )
    return total / (labels != -100).sum()


def no_checkpoint():
    total = sum(chunk_loss(hc, yc) for hc, yc in zip(hidden.split(rows), labels.split(rows), strict=True))
    return total / (labels != -100).sum()


def run(loss_fn):
    hidden.grad = None
    saved: dict[int, tuple[int, ...]] = {}  # each saved storage once: its shape

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = tuple(t.shape)
        return t

    with Shapes() as ops, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn()
    loss.backward()
    return loss.detach(), hidden.grad.clone(), ops.shapes, saved


whole = F.cross_entropy(lm_head(hidden), labels, ignore_index=-100)
good, good_grad, good_ops, good_saved = run(right)
assert torch.allclose(good, whole.detach())

averaged, averaged_grad, _, _ = run(mean_of_means)
assert not torch.allclose(averaged, good, rtol=1e-3) and not torch.allclose(
    averaged_grad, good_grad, rtol=1e-2
)

assert (n, v) not in good_ops  # chunking the hidden states: never a whole logits tensor
_, split_grad, split_ops, _ = run(split_logits)
assert (n, v) in split_ops and torch.allclose(split_grad, good_grad, atol=1e-7)


def logits_rows(saved: dict[int, tuple[int, ...]]) -> list[int]:
    """The rows of each saved (rows, vocabulary) tensor: log-softmaxes, not the weight's (d, v) view."""
    return [s[0] for s in saved.values() if len(s) == 2 and s[1] == v and s[0] != d]


assert logits_rows(run(no_checkpoint)[3]) == [rows] * 3  # every chunk's, together the whole logits
assert logits_rows(good_saved) == []
