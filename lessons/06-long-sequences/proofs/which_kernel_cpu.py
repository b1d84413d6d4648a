"""The default order is flash, memory-efficient, math, then cuDNN; the profiler names the backend that
ran: on the CPU, aten::_scaled_dot_product_flash_attention_for_cpu by default and
aten::_scaled_dot_product_attention_math under sdpa_kernel(MATH); a backend allowed alone that cannot
serve the call raises instead of falling back, with a warning that says why (the CPU's flash kernel
takes no dropout; the CPU has no memory-efficient kernel)."""

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile

order = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
    SDPBackend.CUDNN_ATTENTION,
]
assert torch._C._get_sdp_priority_order()[:4] == [int(b) for b in order]

q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))


def ops_of(backend: SDPBackend | None) -> set[str]:
    with profile() as prof:
        if backend is None:
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return {event.key for event in prof.key_averages()}


default, math_ops = ops_of(None), ops_of(SDPBackend.MATH)
assert "aten::_scaled_dot_product_flash_attention_for_cpu" in default, default
assert "aten::_scaled_dot_product_attention_math" not in default
assert "aten::_scaled_dot_product_attention_math" in math_ops, math_ops
assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in math_ops

try:
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
except RuntimeError as e:
    assert "No viable backend" in str(e), e
else:
    raise AssertionError("memory-efficient attention alone ran on the CPU")

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    except RuntimeError as e:
        assert "No available kernel" in str(e), e
    else:
        raise AssertionError("flash attention alone ran with dropout on the CPU")
said = [str(w.message) for w in caught]
assert any("Flash attention kernel not used because" in m for m in said), said
assert any("dropout" in m for m in said), said
