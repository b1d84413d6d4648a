"""On CUDA, bfloat16 inputs run flash attention; float32 inputs, or a mask tensor of one's own, move
the call to the memory-efficient kernel, not to math; flash allowed alone refuses float32 with a
warning that names the dtype."""

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

FLASH = "aten::_scaled_dot_product_flash_attention"
EFFICIENT = "aten::_scaled_dot_product_efficient_attention"
MATH = "aten::_scaled_dot_product_attention_math"


def ops(q, k, v, **kwargs) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, **kwargs)
        torch.cuda.synchronize()
    return {event.key for event in prof.key_averages()}


bf16 = [torch.randn(1, 4, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
fp32 = [t.float() for t in bf16]
mask = torch.ones(512, 512, dtype=torch.bool, device="cuda").tril()

assert FLASH in ops(*bf16, is_causal=True)
for name, ran in (("float32", ops(*fp32, is_causal=True)), ("mask", ops(*bf16, attn_mask=mask))):
    assert FLASH not in ran and MATH not in ran and EFFICIENT in ran, (name, ran)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(*fp32, is_causal=True)
    except RuntimeError:
        pass
    else:
        raise AssertionError("flash attention alone ran on float32 inputs")
said = [str(w.message) for w in caught]
assert any("Flash attention" in m for m in said) and any("dtype" in m for m in said), said
