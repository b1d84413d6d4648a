# torch.func: per-micro-batch gradients taken functionally and summed into .grad. The transform
# refuses saved-tensor hooks: the meter's are set aside while it runs (memory is graded from the
# kernel's count of the process here; the meter only names mistakes).
import torch
from torch.func import functional_call, grad


def train(model, loader, loss_fn, optimizer, accum_steps):
    params = dict(model.named_parameters())

    def loss_of(p, x, y):
        return loss_fn(functional_call(model, p, (x,)), y) / accum_steps

    for i, (x, y) in enumerate(loader):
        g = grad(loss_of)({k: v.detach() for k, v in params.items()}, x, y)
        with torch.no_grad():
            for name, p in params.items():
                p.grad = g[name] if p.grad is None else p.grad + g[name]
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
