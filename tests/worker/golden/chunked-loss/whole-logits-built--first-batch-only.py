# wrong (red team, issue 41): the whole logits (the starter's loss) on the first batch, chunks as
# asked after it: one run, its memory counted over every batch, and the whole logits' peak is in it
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    head = model.lm_head

    def chunk_loss(h, y):
        return F.cross_entropy(head(h), y, reduction="sum", ignore_index=-100)

    for i, (tokens, labels) in enumerate(loader):
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        if i == 0:
            loss = F.cross_entropy(head(h), y, ignore_index=-100)
        else:
            total = 0
            for s in range(0, len(y), chunk_size):
                total = total + checkpoint(
                    chunk_loss, h[s : s + chunk_size], y[s : s + chunk_size], use_reentrant=False
                )
            loss = total / (y != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
