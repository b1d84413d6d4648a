# Every gradient moved out of .grad as its hook runs and all of them stepped in the last hook: the
# child's own lists see one .grad at a time, but every gradient is alive at once. In a memory run of
# one batch Adam's new state hid them; in the second batch the kernel counts them (88.9 MiB > 80).
def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = {p: make_optimizer([p]) for p in params}
    stash = {}

    def hook(p):
        stash[p] = p.grad
        p.grad = None
        if len(stash) == len(params):  # the last gradient of this backward
            for q in params:
                q.grad = stash.pop(q)
                optimizers[q].step()
                q.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    for x, y in loader:
        loss_fn(model(x), y).backward()
