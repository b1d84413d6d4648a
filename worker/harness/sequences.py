"""Seeded language models and token batches for lesson 6 (long sequences and big vocabularies).

A leaf module (stdlib + torch, no sibling imports): the sandboxed harness builds the learner's run
with it and the trusted checks build the reference with it, so both start from the same
parameters and see the same tokens.
"""

from typing import Any

import torch
from torch import nn

IGNORE_INDEX = -100


class TinyLM(nn.Module):
    """Token embeddings, one mixing layer and ``lm_head``: ``hidden(tokens)`` gives the hidden
    states ``(..., dim)``, ``lm_head`` turns them into logits ``(..., vocab)``."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab)

    @staticmethod
    def layout(vocab: int, dim: int, dtype: str) -> list[dict[str, Any]]:
        """Its parameters' shapes, in order, as ``sharing.layout`` gives them, without drawing
        them (the supervisor's ``prepare``: 4 MiB of weights at 16,384 words)."""
        shapes = [[vocab, dim], [dim, dim], [dim], [vocab, dim], [vocab]]
        return [{"shape": shape, "dtype": dtype} for shape in shapes]

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mix(self.embed(tokens)))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.hidden(tokens))


def _batch(vocab: int, rows: int, length: int, most_padding: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` sequences of ``length`` tokens and their labels, each row's last 0 to
    ``most_padding`` labels padding (``IGNORE_INDEX``): rows of uneven real length. The last row
    has none, so that a short last chunk holds real tokens."""
    x = torch.randint(0, vocab, (rows, length))
    y = torch.randint(0, vocab, (rows, length))
    for row, pad in enumerate(torch.randint(0, most_padding + 1, (rows - 1,)).tolist()):
        if pad:
            y[row, length - pad :] = IGNORE_INDEX
    return x, y


def chunked(params: dict, dtype: torch.dtype = torch.float64) -> tuple[TinyLM, list]:
    """The chunked loss's maths run (lesson 6): a small ``TinyLM`` and ``n_batches`` batches of
    ``batch_size`` rows of ``seq_len`` tokens, seeded by ``params["seed"]``."""
    torch.manual_seed(int(params.get("seed", 0)))
    model = TinyLM(int(params["vocab"]), int(params["dim"])).to(dtype)
    rows, length = int(params["batch_size"]), int(params["seq_len"])
    batches = [
        _batch(int(params["vocab"]), rows, length, int(params.get("most_padding", 3)))
        for _ in range(int(params["n_batches"]))
    ]
    return model, batches


class PackedLM(nn.Module):
    """Token and position embeddings, one attention layer, ``lm_head``: ``model(tokens, positions,
    mask)`` with ``tokens`` and ``positions`` ``(rows, length)`` and ``mask`` ``(rows, length,
    length)``, True where a query may attend a key, gives the logits ``(rows, length, vocab)``.
    Every token also sees itself, so that a padding position with nothing else to see stays
    finite."""

    def __init__(self, vocab: int, dim: int, length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(length, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab)

    @staticmethod
    def layout(vocab: int, dim: int, length: int, dtype: str) -> list[dict[str, Any]]:
        """Its parameters' shapes, in order, as ``sharing.layout`` gives them, without drawing
        them (the supervisor's ``prepare``)."""
        shapes = [
            [vocab, dim],
            [length, dim],
            [3 * dim, dim],
            [3 * dim],
            [dim, dim],
            [dim],
            [vocab, dim],
            [vocab],
        ]
        return [{"shape": shape, "dtype": dtype} for shape in shapes]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position(positions)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        itself = torch.eye(tokens.shape[-1], dtype=torch.bool, device=tokens.device)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool() | itself)
        return self.lm_head(torch.tanh(h + self.out(attended)))


def packing(params: dict, dtype: torch.dtype = torch.float64) -> tuple[PackedLM, list]:
    """Packing's run (lesson 6): a ``PackedLM`` for rows of ``row_len`` tokens and ``n_batches``
    batches, each a list of ``docs_per_batch`` documents (1-D token tensors) of ``min_doc`` to
    ``max_doc`` tokens, seeded by ``params["seed"]``."""
    torch.manual_seed(int(params.get("seed", 0)))
    vocab, length = int(params["vocab"]), int(params["row_len"])
    model = PackedLM(vocab, int(params["dim"]), length).to(dtype)
    low, high = int(params["min_doc"]), int(params["max_doc"])
    batches = [
        [
            torch.randint(0, vocab, (int(n),))
            for n in torch.randint(low, high + 1, (int(params["docs_per_batch"]),))
        ]
        for _ in range(int(params["n_batches"]))
    ]
    return model, batches
