# wrong (red team, issue 41): chunks of 1.5 x chunk_size token positions (the asked bound is
# chunk_size), in every run.
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

FACTOR = 1.5


def train(model, loader, optimizer, chunk_size):
    def chunk_loss(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum", ignore_index=-100)

    size = int(FACTOR * chunk_size)
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        total = 0
        for s in range(0, len(y), size):
            total = total + checkpoint(chunk_loss, h[s : s + size], y[s : s + size], use_reentrant=False)
        (total / (y != -100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
