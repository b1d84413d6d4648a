"""scaled_dot_product_attention (on the CPU, its flash kernel) gives the naive output and gradients
while saving for backward only q, k, v, the output and one number per query: no L x L tensor, and
bytes that grow with L; the math backend saves the L x L weights."""

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    length = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


def run(attention, length: int):
    q, k, v = (torch.randn(1, 2, length, 16, requires_grad=True) for _ in range(3))
    shapes: list[tuple[int, ...]] = []
    nbytes = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(t.shape))
        nbytes[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = attention(q, k, v)
    out.sum().backward()
    return out, [t.grad for t in (q, k, v)], shapes, nbytes[0]


def fused(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def math_backend(q, k, v):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


for length in (128, 256):
    torch.manual_seed(length)
    ref_out, ref_grads, _, _ = run(naive, length)
    torch.manual_seed(length)
    out, grads, shapes, _ = run(fused, length)
    torch.manual_seed(length)
    _, _, math_shapes, _ = run(math_backend, length)
    assert torch.allclose(out, ref_out, atol=1e-5)
    assert all(torch.allclose(g, r, atol=1e-4) for g, r in zip(grads, ref_grads, strict=True))
    assert not any(s[-2:] == (length, length) for s in shapes), shapes
    assert sorted(shapes) == sorted([(1, 2, length, 16)] * 4 + [(1, 2, length)])  # q, k, v, out, logsumexp
    assert any(s[-2:] == (length, length) for s in math_shapes), math_shapes

assert run(fused, 256)[3] == 2 * run(fused, 128)[3]  # linear in L
