from torch.utils.checkpoint import checkpoint


def summed_nll(model, h, y):
    logp = model.lm_head(h).log_softmax(-1)
    real = y != -100
    picked = logp.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1)
    return -(picked * real).sum()


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h, y = model.hidden(tokens).flatten(0, 1), labels.flatten()
        count = int((y != -100).sum())
        start, total = 0, None
        while start < len(y):
            part = checkpoint(
                summed_nll,
                model,
                h[start : start + chunk_size],
                y[start : start + chunk_size],
                use_reentrant=False,
            )
            total = part if total is None else total + part
            start += chunk_size
        loss = total / count
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
