import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def piece(head, h, y):
    return F.cross_entropy(head(h), y, reduction="sum")


def train(model, loader, optimizer, chunk_size):
    rows = max(1, chunk_size // 2 + 1)  # smaller chunks than allowed, and not a divisor
    for tokens, labels in loader:
        h = model.hidden(tokens)
        h = h.view(-1, h.shape[-1])
        y = labels.view(-1)
        total = torch.zeros((), dtype=h.dtype)
        for hc, yc in zip(torch.split(h, rows), torch.split(y, rows), strict=True):
            total = total + checkpoint(piece, model.lm_head, hc, yc, use_reentrant=False)
        (total / y.ne(-100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
