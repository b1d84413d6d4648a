# wrong (red team 5): one padded row per document, the forward written by hand, and a call for
# show of model.embed on 3 rows of row_len so that the report says packed. One run: the kernel's
# rise (a row of logits per document) fails it.
import torch
import torch.nn.functional as F


def _forward(model, tokens, positions, mask):
    # PackedLM.forward written out; the embedding looked up by hand
    h = F.embedding(tokens, model.embed.weight) + model.position(positions)
    q, k, v = model.qkv(h).chunk(3, dim=-1)
    itself = torch.eye(tokens.shape[-1], dtype=torch.bool)
    att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | itself)
    return model.lm_head(torch.tanh(h + model.out(att)))


def train(model, loader, optimizer, row_len):
    for documents in loader:
        # WRONG: one padded row per document; the model's embedding never sees the rows
        n = len(documents)
        tokens = torch.stack([F.pad(d, (0, row_len - len(d))) for d in documents])
        labels = torch.stack([F.pad(d[1:], (0, row_len - len(d) + 1), value=-100) for d in documents])
        positions = torch.arange(row_len).repeat(n, 1)
        mask = torch.ones(n, row_len, row_len, dtype=torch.bool).tril()
        model.embed(torch.zeros(3, row_len, dtype=torch.long))  # the report: one call on 3 rows
        logits = _forward(model, tokens, positions, mask)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
