"""Seeded models and data for the training-loop exercises.

A leaf module (stdlib + torch, no sibling imports): the sandboxed harness builds the
learner's run with it and the trusted checks build the reference with it, so both
start from the same parameters and see the same micro-batches.
"""

import gc
import random
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

IGNORE_INDEX = -100
Params = Mapping[str, Any]  # an exercise's check parameters
Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets)


class TokenLoss(nn.Module):
    """Per-token cross-entropy: ``logits (..., V)``, ``targets (...)`` → losses shaped like
    ``targets``, 0 where the target is padding (``-100``)."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        flat = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="none",
        )
        return flat.reshape(targets.shape)


@dataclass
class Scenario:
    model: Any  # an nn.Module: the kinds and checks index it and move it freely
    micro_batches: list[Batch]  # [(x, y)]
    loss_fn: nn.Module
    tokens: bool  # per-token losses (sum / token count) instead of a mean per sample

    def weight(self, y: torch.Tensor) -> int:
        """How much one micro-batch counts in a large batch: samples, or real tokens."""
        return int((y != IGNORE_INDEX).sum()) if self.tokens else int(y.shape[0])

    def positions(self, y: torch.Tensor) -> int:
        """Loss positions, padding included."""
        return int(y.numel())

    def unit_objective(self, loss: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The micro-batch's own mean loss, from what ``loss_fn`` returned."""
        if self.tokens:
            return loss.sum() / max(self.weight(y), 1)
        return loss

    def batch_loss(self, model: nn.Module, batches: Sequence[Batch]) -> torch.Tensor:
        """The true large-batch loss of ``batches`` taken as one batch."""
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        loss = self.loss_fn(model(x), y)
        return self.unit_objective(loss, y)


def _samples(params: Params, dtype: torch.dtype, features: int, classes: int) -> list[Batch]:
    """``params["n_micro"]`` micro-batches of ``params["micro_batch"]`` samples: normal inputs,
    uniform class targets. Where ``params["draw"]`` is "float32", each micro-batch is drawn on
    its own in float32 and widened to ``dtype``: a third of the time of one float64 draw cut into
    copies (0.08 s against 0.21 for 1.28 million rows), for the micro-batches large enough for
    the kernel to count."""
    n_micro, micro = int(params["n_micro"]), int(params["micro_batch"])
    if params.get("draw") == "float32":
        draws = ((torch.randn(micro, features), torch.randint(0, classes, (micro,))) for _ in range(n_micro))
        return [(x.to(dtype), y) for x, y in draws]
    x = torch.randn(n_micro * micro, features, dtype=dtype)
    y = torch.randint(0, classes, (n_micro * micro,))
    return [(x[i : i + micro].clone(), y[i : i + micro].clone()) for i in range(0, n_micro * micro, micro)]


def _mlp(params: Params, dtype: torch.dtype) -> Scenario:
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(dtype)
    return Scenario(model, _samples(params, dtype, 6, 3), nn.CrossEntropyLoss(), tokens=False)


class Features(nn.Module):
    """The accumulation exercises' model, made for the kernel's count of their memory: a
    linear read of the input beside a linear read of 16 fixed random ReLU features of it.

    What one micro-batch saves for backward is mostly those features (the second read's input:
    160,000 × 16 float64, 20 MiB), and they have no gradient of their own to compute. So a
    micro-batch allocates about a third of what an MLP saving as much allocates (its hidden
    layer's output, ReLU's, and both their gradients), and on a machine where fresh pages cost
    about 1 ms per MiB (a virtual machine's page faults; ``exact_malloc`` gives every block back)
    the run takes half the time, with the same difference between one micro-batch's activations
    alive and two (23 MiB)."""

    expand: torch.Tensor  # the fixed features' weights: a buffer, moved and copied with the model

    def __init__(self, inputs: int = 6, width: int = 16, classes: int = 3) -> None:
        super().__init__()
        self.direct = nn.Linear(inputs, classes)
        self.read = nn.Linear(width, classes)
        self.register_buffer("expand", torch.randn(width, inputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.relu_(x @ self.expand.t())  # in place: a fresh tensor, no gradient
        return self.direct(x) + self.read(features)


def _features(params: Params, dtype: torch.dtype) -> Scenario:
    model = Features().to(dtype)
    return Scenario(model, _samples(params, dtype, 6, 3), nn.CrossEntropyLoss(), tokens=False)


def _tokens(params: Params, dtype: torch.dtype) -> Scenario:
    n_micro, micro = int(params["n_micro"]), int(params["micro_batch"])
    vocab, dim, length = 11, 8, int(params.get("seq_len", 6))
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.Tanh(), nn.Linear(dim, vocab)).to(dtype)
    batches = []
    for _ in range(n_micro):
        # very different lengths per micro-batch: where averaging means goes wrong
        short = torch.rand(()) < 0.5
        high = 3 if short else length + 1
        lengths = torch.randint(1, high, (micro,))
        x = torch.randint(0, vocab, (micro, length))
        y = torch.randint(0, vocab, (micro, length))
        y[torch.arange(length) >= lengths[:, None]] = IGNORE_INDEX  # each row's padding
        batches.append((x, y))
    return Scenario(model, batches, TokenLoss(), tokens=True)


BUILDERS: dict[str, Callable[[Params, torch.dtype], Scenario]] = {
    "mlp": _mlp,
    "features": _features,
    "tokens": _tokens,
}


def build(params: Params, dtype: torch.dtype = torch.float64) -> Scenario:
    """The scenario named by ``params["scenario"]``, seeded by ``params["seed"]``."""
    torch.manual_seed(int(params.get("seed", 0)))
    return BUILDERS[params.get("scenario", "mlp")](params, dtype)


def placed(params: Params, device: str | torch.device) -> tuple[Scenario, list[Any], dict[int, int]]:
    """The scenario with its model and micro-batches moved to ``device``, its parameters in
    order and each one's index by identity (what the per-parameter kinds, hookstep and adapter,
    report by)."""
    scenario = build(params)
    scenario.model = scenario.model.to(device)
    scenario.micro_batches = [(x.to(device), y.to(device)) for x, y in scenario.micro_batches]
    weights = list(scenario.model.parameters())
    return scenario, weights, {id(p): i for i, p in enumerate(weights)}


def cycles(n_micro: int, accum_steps: int) -> list[list[int]]:
    """Micro-batch indices of each accumulation cycle; the last may be shorter."""
    return [list(range(i, min(i + accum_steps, n_micro))) for i in range(0, n_micro, accum_steps)]


def amp_batches(
    params: Params, device: str | torch.device = "cpu"
) -> tuple[Any, list[Batch], Any]:  # the model, its batches, the loss
    """Mixed precision (lesson 1): a float32 MLP and its batches, one of them poisoned.

    ``x[0, 0]`` of batch ``params["overflow_batch"]`` is inf, so that step's gradients are
    inf/NaN and a GradScaler must skip it.
    """
    torch.manual_seed(int(params.get("seed", 0)))
    n, size = int(params["n_batches"]), int(params["batch_size"])
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    batches = []
    for i in range(n):
        x, y = torch.randn(size, 6), torch.randint(0, 3, (size,))
        if i == int(params["overflow_batch"]):
            x[0, 0] = float("inf")
        batches.append((x.to(device), y.to(device)))
    return model, batches, nn.CrossEntropyLoss()


ITEM = struct.Struct("<6f")  # one input-pipeline item: six float32 features
PIPELINE_LR = 0.1


def pipeline_item(seed: int, index: int) -> bytes:
    """Item ``index`` of the input pipeline's dataset (lesson 3) under ``seed``, packed. The seed
    is drawn by the sandbox's supervisor for each run, after the learner's process was forked:
    that process cannot make the items without asking the supervisor for them."""
    rng = random.Random(f"{seed}:{index}")
    return ITEM.pack(*(rng.gauss(0.0, 1.0) for _ in range(6)))


def pipeline_model() -> nn.Module:
    """The input pipeline's model: six features, three classes (the target is ``index % 3``)."""
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def pipeline_step(
    model: nn.Module, optimizer: Any, x: torch.Tensor, index: torch.Tensor | Sequence[int]
) -> None:
    """One training step of the input pipeline's loop, on ``x``'s device."""
    target = (torch.as_tensor(index) % 3).to(x.device, non_blocking=True)
    nn.functional.cross_entropy(model(x), target).backward()
    optimizer.step()
    optimizer.zero_grad()


class BlockNet(nn.Module):
    """``blocks`` (each a few Linear+Tanh layers) then ``head``: deep enough that its
    activations, not its weights, fill memory."""

    def __init__(self, width: int, blocks: int, depth: int, classes: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.Tanh())])
            for _ in range(blocks)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def block_net(params: Params, dtype: torch.dtype = torch.float64) -> tuple[Any, list[Any], Any]:
    """Activation memory (lesson 4): a seeded ``BlockNet`` and its batches."""
    torch.manual_seed(int(params.get("seed", 0)))
    width, classes = int(params["width"]), 3
    model = BlockNet(width, int(params["blocks"]), int(params["depth"]), classes).to(dtype)
    size = int(params["batch_size"])
    batches = [
        (torch.randn(size, width, dtype=dtype), torch.randint(0, classes, (size,)))
        for _ in range(int(params["n_batches"]))
    ]
    return model, batches, nn.CrossEntropyLoss()


class ServedLoader:
    """A loader the harness serves: ``len()`` batches, and at each ``iter()`` a new pass of
    ``serve()``, a generator of the harness's that tells the supervisor (a sync) as each batch
    is fetched. One class for every kind that serves its batches so (chunked, hookstep,
    adapter)."""

    def __init__(self, count: int, serve: Callable[[], Iterator[Any]]) -> None:
        self._count, self._serve = count, serve

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        return self._serve()


def settle() -> None:
    """In the learner's process, just before the supervisor begins to watch its memory: every
    object there now collected or frozen (``gc.freeze``), so that no collection after touches
    them. A child forked from a process that never froze its objects shares their pages with
    it; a collection writes to every object it walks, so the kernel copies those pages, and the
    job's cgroup counts the copies (measured: 70 MiB at measure-it's first collection, exec
    start): made here, they are in the figure the memory runs are counted from."""
    gc.collect()
    gc.freeze()


def own_pages(tensors: Iterable[torch.Tensor]) -> None:
    """In the learner's process, before the supervisor watches its memory: each tensor given
    storage of this process's own (a copy). A tensor the supervisor built before the fork shares
    its pages with it until written; an optimizer's first write would then copy them inside a
    memory run, pages the job's cgroup counts as that run's (hookstep's wide weights: 24 MiB)."""
    with torch.no_grad():
        for tensor in tensors:
            tensor.data = tensor.data.clone()


class Loader:
    """The micro-batches: iterable, with ``len()`` and indexing."""

    def __init__(self, batches: list[Batch]) -> None:
        self._batches = batches

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self._batches)

    def __getitem__(self, index: int) -> Batch:
        return self._batches[index]


def memory_params(params: Params) -> dict[str, Any] | None:
    """A memory run's scenario (issue 41): ``params["memory_batch"]`` samples in one batch on a
    fresh model seeded apart, or None where the exercise has none. The harness runs the learner's
    code on it; the checks build its reference from the same parameters."""
    if not params.get("memory_batch"):
        return None
    return {
        **{k: v for k, v in params.items() if k not in ("memory_batch", "reference")},
        "batch_size": int(params["memory_batch"]),
        "n_batches": 1,
        "seed": int(params.get("seed", 0)) + 1,
    }


def release_params(params: Params) -> dict[str, Any] | None:
    """fit-the-budget's second memory run (``params["memory_release_width"]``), or None: the
    scenario's ``BlockNet`` (its blocks and depth: a loop may count on them) with layers that
    wide (float64: 36 MiB of weights at 512), one batch of 16 rows, seeded apart. Its
    activations are small, its gradients tens of MiB: what the process still holds once the step
    returned tells released gradients from kept ones (the budget's run has a few KiB of them,
    below what the kernel can tell)."""
    width = int(params.get("memory_release_width") or 0)
    if not width:
        return None
    rest = {k: v for k, v in params.items() if k not in ("memory_batch", "memory_release_width", "reference")}
    return {**rest, "width": width, "batch_size": 16, "n_batches": 1, "seed": int(params.get("seed", 0)) + 2}
