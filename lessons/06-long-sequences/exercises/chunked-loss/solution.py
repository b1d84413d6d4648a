import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    """The loss over chunks of hidden states: each chunk's logits exist only while it is used."""

    def chunk_loss(h, y):  # h: (rows, dim), y: (rows,)
        logits = model.lm_head(h)  # (rows, vocab): one chunk's logits, built again in backward
        return F.cross_entropy(logits, y, reduction="sum", ignore_index=-100)

    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)  # (rows * seq, dim): a chunk may cross rows
        y = labels.flatten()
        total = 0
        for start in range(0, len(y), chunk_size):  # the last chunk may be shorter
            end = start + chunk_size
            total = total + checkpoint(chunk_loss, h[start:end], y[start:end], use_reentrant=False)
        loss = total / (y != -100).sum()  # once, by the real tokens of the whole batch
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
