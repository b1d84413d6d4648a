# The solution with each of the harness's Adams set fused (no temporaries): right, and lighter.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}
    for opt in optimizers.values():
        opt.param_groups[0]["fused"] = True

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for x, y in loader:
        loss_fn(model(x), y).backward()
