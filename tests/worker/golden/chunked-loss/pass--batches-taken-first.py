# right (red team 5): the solution's loss, the batches taken first (`list(loader)`); read after
# each optimizer step, not at the next fetch, it passes.
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    """The solution's loss; the batches taken from the loader first (a right loop)."""

    def chunk_loss(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum", ignore_index=-100)

    batches = list(loader)  # two batches of 1,000 tokens: a few KiB
    for tokens, labels in batches:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        total = 0
        for start in range(0, len(y), chunk_size):
            total = total + checkpoint(
                chunk_loss, h[start : start + chunk_size], y[start : start + chunk_size], use_reentrant=False
            )
        loss = total / (y != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
