# The solution with each of the harness's Adams set to torch's foreach implementation.
def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = []
    for p in params:
        opt = make_optimizer([p])
        opt.param_groups[0]["foreach"] = True
        optimizers.append(opt)
    by_id = {id(p): opt for p, opt in zip(params, optimizers, strict=True)}

    def step_now(p):
        by_id[id(p)].step()
        p.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(step_now)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
