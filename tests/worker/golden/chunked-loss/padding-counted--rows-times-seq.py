import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        rows, seq = tokens.shape
        h = model.hidden(tokens).reshape(rows * seq, -1)
        y = labels.reshape(rows * seq)
        total = 0.0
        for start in range(0, rows * seq, chunk_size):
            hc, yc = h[start : start + chunk_size], y[start : start + chunk_size]
            total += checkpoint(
                lambda a, b: F.cross_entropy(model.lm_head(a), b, reduction="sum"),
                hc,
                yc,
                use_reentrant=False,
            )
        loss = total / (rows * seq)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
