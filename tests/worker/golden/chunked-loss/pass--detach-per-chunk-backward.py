import torch.nn.functional as F


def train(model, loader, optimizer, chunk_size):
    # each chunk's loss backward on its own, into a detached copy of the hidden states; then the
    # body's backward once with the gradient they gathered: no checkpoint, no logits kept
    for tokens, labels in loader:
        hidden = model.hidden(tokens).flatten(0, 1)
        y = labels.flatten()
        real = (y != -100).sum()
        h = hidden.detach().requires_grad_()
        for hc, yc in zip(h.split(chunk_size), y.split(chunk_size), strict=True):
            loss = F.cross_entropy(model.lm_head(hc), yc, reduction="sum", ignore_index=-100) / real
            loss.backward()
        hidden.backward(h.grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
