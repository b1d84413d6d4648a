# torchtune style: sum now, divide the gradients by the cycle's token count at the boundary
import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    n_tokens = 0
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        n_tokens += int((y != -100).sum())
        loss_fn(model(x), y).sum().backward()
        if (step + 1) % accum_steps == 0:
            with torch.no_grad():
                for p in model.parameters():
                    p.grad /= n_tokens
            optimizer.step()
            optimizer.zero_grad()
            n_tokens = 0
