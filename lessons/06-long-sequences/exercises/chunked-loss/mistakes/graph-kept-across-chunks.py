import torch.nn.functional as F


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        total = 0
        for hc, yc in zip(h.split(chunk_size), y.split(chunk_size), strict=True):
            total += F.cross_entropy(model.lm_head(hc), yc, reduction="sum", ignore_index=-100)
        (total / (y != -100).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
