# torch.func over a whole cycle at once: one grad call on the summed losses of its micro-batches.
# The numbers are right, but every micro-batch's activations are alive together inside the
# transform; the meter's hooks are set aside there, and the kernel's count of the memory run is
# what fails it (no mistake is named: the meter saw nothing to name it by).
import torch
from torch.func import functional_call, grad


def train(model, loader, loss_fn, optimizer, accum_steps):
    params = dict(model.named_parameters())

    def cycle_loss(p, xs, ys):
        losses = (loss_fn(functional_call(model, p, (x,)), y) for x, y in zip(xs, ys, strict=True))
        return sum(losses) / accum_steps

    xs, ys = [], []
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        if len(xs) == accum_steps:
            g = grad(cycle_loss)({k: v.detach() for k, v in params.items()}, xs, ys)
            with torch.no_grad():
                for name, p in params.items():
                    p.grad = g[name]
            optimizer.step()
            optimizer.zero_grad()
            xs, ys = [], []
