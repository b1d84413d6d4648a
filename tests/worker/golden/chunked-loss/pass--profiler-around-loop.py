# correct: the solution's chunked loss, with torch.profiler around the loop.
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    def chunk_loss(h, y):
        return F.cross_entropy(model.lm_head(h), y, reduction="sum", ignore_index=-100)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for tokens, labels in loader:
            h = model.hidden(tokens).flatten(0, 1)
            y = labels.flatten()
            total = 0
            for s in range(0, len(y), chunk_size):
                piece = slice(s, s + chunk_size)
                total = total + checkpoint(chunk_loss, h[piece], y[piece], use_reentrant=False)
            (total / (y != -100).sum()).backward()
            optimizer.step()
            optimizer.zero_grad()
    print(len(prof.key_averages()))
