# wrong (red team, issue 41): builds every token's logits at once (the starter's loss) unless
# the vocabulary is large
# (the grader's memory run), where it chunks as asked.
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    big = model.lm_head.out_features >= 1000

    def chunk_loss(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum", ignore_index=-100)

    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        if big:
            total = 0
            for s in range(0, len(y), chunk_size):
                piece = slice(s, s + chunk_size)
                total = total + checkpoint(chunk_loss, h[piece], y[piece], use_reentrant=False)
            loss = total / (y != -100).sum()
        else:
            loss = F.cross_entropy(model.lm_head(h), y, ignore_index=-100)  # whole logits
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
