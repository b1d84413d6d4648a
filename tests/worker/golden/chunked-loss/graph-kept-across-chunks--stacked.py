import torch
import torch.nn.functional as F


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
        losses = [
            F.cross_entropy(model.lm_head(hc), yc, ignore_index=-100, reduction="sum")
            for hc, yc in zip(h.split(chunk_size), y.split(chunk_size), strict=True)
        ]
        loss = torch.stack(losses).sum() / (y != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
