# right: each parameter's Adam made from a param group, torch.optim's dict form
# (red team 8: the harness's recording read the dict as a tensor and called the run interfered)
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {}
    for p in model.parameters():
        optimizers[p] = make_optimizer([{"params": [p]}])

        def step(param):
            optimizers[param].step()
            param.grad = None

        p.register_post_accumulate_grad_hook(step)
    for x, y in loader:
        loss_fn(model(x), y).backward()
