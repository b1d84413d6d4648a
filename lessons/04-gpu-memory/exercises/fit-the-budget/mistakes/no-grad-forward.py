import torch


def train_step(model, x, y, loss_fn, optimizer):
    with torch.no_grad():  # no activations saved at all
        logits = model(x)
    loss = loss_fn(logits, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
