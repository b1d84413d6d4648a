# Batches listed first, each parameter's step taken in the NEXT backward's hook with the gradient
# of the batch before (held aside, then released): every step inside backward, one batch stale,
# the last batch's gradient never used.
def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = {p: make_optimizer([p]) for p in params}
    pending = {}

    def hook(p):
        held = pending.pop(p, None)
        fresh, p.grad = p.grad, held
        if held is not None:
            optimizers[p].step()
        pending[p] = fresh
        p.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    for x, y in list(loader):
        loss_fn(model(x), y).backward()
