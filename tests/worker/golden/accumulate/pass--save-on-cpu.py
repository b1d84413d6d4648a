# Activations offloaded with save_on_cpu (a no-op move on the CPU).
from torch.autograd.graph import save_on_cpu


def train(model, loader, loss_fn, optimizer, accum_steps):
    for i, (x, y) in enumerate(loader):
        with save_on_cpu(pin_memory=False):
            loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
