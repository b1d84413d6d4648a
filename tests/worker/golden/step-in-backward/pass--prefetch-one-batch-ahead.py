# The solution's hooks, the loop over a generator that holds the next batch while the current one
# trains (red team 6 F1: read as each batch was fetched, this was read a batch early and refused).
def ahead(loader):
    it = iter(loader)
    held = next(it, None)
    for following in it:
        yield held
        held = following
    if held is not None:
        yield held


def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for x, y in ahead(loader):
        loss_fn(model(x), y).backward()
