import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    def piece(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum")

    for tokens, labels in loader:
        h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
        total = sum(
            checkpoint(piece, a, b, use_reentrant=False)
            for a, b in zip(h.split(chunk_size), y.split(chunk_size), strict=True)
        )
        loss = total / y.numel()  # every position, padding too
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
