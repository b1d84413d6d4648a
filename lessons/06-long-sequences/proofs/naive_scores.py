"""Attention written by hand keeps its softmax, batch x heads x L x L numbers, for backward: twice
the length, four times the bytes; one sequence of 8192 tokens with 32 heads is 8 GiB in float32."""

import math

import torch


def saved_square_bytes(length: int, heads: int = 2, d: int = 16) -> int:
    """Bytes of the L x L tensors autograd saves for one naive attention (each storage once)."""
    q, k, v = (torch.randn(1, heads, length, d, requires_grad=True) for _ in range(3))
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.shape[-2:] == (length, length):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        weights = scores.softmax(dim=-1)
        out = weights @ v
    out.sum().backward()
    return sum(storages.values())


short, long = saved_square_bytes(128), saved_square_bytes(256)
assert short == 1 * 2 * 128 * 128 * 4  # the softmax: batch x heads x L x L float32, saved once
assert long == 4 * short
assert 1 * 32 * 8192 * 8192 * 4 == 8 * 2**30
