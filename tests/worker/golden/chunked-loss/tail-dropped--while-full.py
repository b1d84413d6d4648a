import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def summed(head, h, y):
    return F.cross_entropy(head(h), y, reduction="sum", ignore_index=-100)


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
        total, start = 0, 0
        while start + chunk_size <= len(y):  # stops before a shorter last chunk
            total = total + checkpoint(
                summed,
                model.lm_head,
                h[start : start + chunk_size],
                y[start : start + chunk_size],
                use_reentrant=False,
            )
            start += chunk_size
        (total / (y != -100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
