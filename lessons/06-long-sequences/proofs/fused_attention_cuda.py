"""On CUDA, what forward keeps for backward: the math backend holds at least batch x heads x L x L
16-bit numbers, flash attention a small fraction of that, for the same output."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

heads, length = 8, 4096
scores_bytes = heads * length * length * 2


def kept(backend: SDPBackend) -> tuple[int, torch.Tensor]:
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(1, heads, length, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before  # the output and what autograd saved
    return held, out.detach().float()


math_held, math_out = kept(SDPBackend.MATH)
flash_held, flash_out = kept(SDPBackend.FLASH_ATTENTION)
assert math_held >= scores_bytes, (math_held, scores_bytes)
assert flash_held < scores_bytes / 20, (flash_held, scores_bytes)
assert torch.allclose(math_out, flash_out, atol=2e-2)
