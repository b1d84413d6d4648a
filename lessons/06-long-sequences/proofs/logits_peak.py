"""The logits are tokens x vocabulary: 8 rows of 2048 tokens with a 128,256-word vocabulary are 8.4 GB
in float32, more than 1 billion bfloat16 weights; cross-entropy keeps a float32 log-softmax of that
size for backward, under autocast too, where the last layer's own output is bfloat16."""

import torch
import torch.nn.functional as F

tokens, vocab = 8 * 2048, 128_256
assert round(tokens * vocab / 1e9, 1) == 2.1 and round(tokens * vocab * 4 / 1e9, 1) == 8.4
assert tokens * vocab * 4 > 1_000_000_000 * 2

torch.manual_seed(0)
n, d, v = 64, 32, 1000
lm_head = torch.nn.Linear(d, v, bias=False)
hidden = torch.randn(n, d, requires_grad=True)
labels = torch.randint(0, v, (n,))

for autocast in (False, True):
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor, saved: list[torch.Tensor] = saved) -> torch.Tensor:
        saved.append(t)
        return t

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast),
    ):
        logits = lm_head(hidden)
        loss = F.cross_entropy(logits, labels)
    assert logits.dtype == (torch.bfloat16 if autocast else torch.float32)
    assert loss.dtype == torch.float32
    log_softmax = F.log_softmax(logits.float(), dim=-1)
    assert any(
        t.shape == (n, v) and t.dtype == torch.float32 and torch.allclose(t, log_softmax) for t in saved
    ), [(tuple(t.shape), t.dtype) for t in saved]
