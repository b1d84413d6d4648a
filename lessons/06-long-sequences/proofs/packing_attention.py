"""Documents packed into one row, with a block-diagonal causal mask and positions that restart, give
each token the logits it gets with its document alone, so the same loss and gradients; with plain
causal attention the later documents' logits change, and so they do with positions that run on."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
vocab, width, heads = 50, 16, 2


class Tiny(nn.Module):
    """Token and learned position embeddings, one attention layer, a head over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(16, width)
        self.qkv, self.head = nn.Linear(width, 3 * width), nn.Linear(width, vocab)

    def forward(self, tokens, positions, mask=None):
        x = self.tok(tokens) + self.pos(positions)  # (L, width)
        q, k, v = (t.view(-1, heads, width // heads).transpose(0, 1) for t in self.qkv(x).chunk(3, -1))
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.head(x + out.transpose(0, 1).reshape(-1, width))  # (L, vocab)


model = Tiny()
docs = [torch.randint(0, vocab, (n,)) for n in (3, 2, 3)]
alone = torch.cat([model(d, torch.arange(len(d))) for d in docs])

row = torch.cat(docs)
doc = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)])
pos = torch.cat([torch.arange(len(d)) for d in docs])  # restart with each document
causal = torch.ones(len(row), len(row), dtype=torch.bool).tril()
mask = (doc[:, None] == doc[None, :]) & causal

packed = model(row, pos, mask)
assert torch.allclose(packed, alone, atol=1e-5)

first = doc == 0
plain = model(row, pos)  # is_causal=True only: later documents see the earlier ones
assert torch.allclose(plain[first], alone[first], atol=1e-5) and not torch.allclose(plain, alone, atol=1e-3)
running_on = model(row, torch.arange(len(row)), mask)  # positions 0..7, not restarted
assert torch.allclose(running_on[first], alone[first], atol=1e-5)
assert not torch.allclose(running_on, alone, atol=1e-3)

# the same loss, so the same gradients: labels inside each document only
labels = torch.cat([torch.cat([d[1:], torch.tensor([-100])]) for d in docs])
grads = []
for logits in (model(row, pos, mask), torch.cat([model(d, torch.arange(len(d))) for d in docs])):
    model.zero_grad()
    F.cross_entropy(logits, labels, ignore_index=-100).backward()
    grads.append([p.grad.clone() for p in model.parameters()])
assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads, strict=True))
