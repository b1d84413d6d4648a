# wrong (red team 5): never packs: each document alone, unpadded, in a forward of its own written
# by hand, and model.embed called once per batch on a (1, 1) dummy. Its numbers and memory are a
# packed loop's: only the program's own report (1 token position, not whole rows) fails it.
import torch
import torch.nn.functional as F


def _forward(model, tokens, positions, mask):
    # PackedLM.forward written out; the embedding looked up by hand (no hook sees it)
    h = F.embedding(tokens, model.embed.weight) + model.position(positions)
    q, k, v = model.qkv(h).chunk(3, dim=-1)
    itself = torch.eye(tokens.shape[-1], dtype=torch.bool)
    att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | itself)
    return model.lm_head(torch.tanh(h + model.out(att)))


def train(model, loader, optimizer, row_len):
    """WRONG: no packing at all. Every document runs alone, in a row of its own length, one
    forward per document (what the reference computes); the model's embedding is called once per
    batch on one token so that the harness's hook counts one call of one position."""
    for documents in loader:
        model.embed(torch.zeros(1, 1, dtype=torch.long))
        total = 0
        labels = 0
        for doc in documents:
            n = len(doc)
            logits = _forward(
                model, doc[None], torch.arange(n)[None], torch.ones(1, n, n, dtype=torch.bool).tril()
            )
            total = total + F.cross_entropy(logits[0, :-1], doc[1:], reduction="sum")
            labels += n - 1
        (total / labels).backward()
        optimizer.step()
        optimizer.zero_grad()
