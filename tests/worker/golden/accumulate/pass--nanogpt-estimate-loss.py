# nanoGPT's estimate_loss: after each update, the model is evaluated under torch.no_grad on a
# batch already seen (eval mode, then back to train).
import torch


@torch.no_grad()
def estimate_loss(model, loss_fn, batches):
    model.eval()
    losses = torch.stack([loss_fn(model(x), y) for x, y in batches])
    model.train()
    return losses.mean().item()


def train(model, loader, loss_fn, optimizer, accum_steps):
    seen = []
    for i, (x, y) in enumerate(loader):
        seen.append((x, y))
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            print(f"step {(i + 1) // accum_steps}: loss {estimate_loss(model, loss_fn, seen[-1:]):.4f}")
