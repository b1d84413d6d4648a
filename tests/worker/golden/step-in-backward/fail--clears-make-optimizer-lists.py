# Every list in make_optimizer's closure (and its step wrapper's) emptied and given a junk entry mid-run.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}
    lists = [c.cell_contents for c in make_optimizer.__closure__ or () if isinstance(c.cell_contents, list)]

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for i, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        if i == 0:
            for held in lists:
                held.clear()
                held.append([0])
