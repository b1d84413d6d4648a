# One optimizer per named parameter, a hook factory, the loop over range(len(loader)) by index.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = {name: make_optimizer([p]) for name, p in model.named_parameters()}

    def hook_for(name):
        def hook(param):
            optimizers[name].step()
            param.grad = None

        return hook

    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(hook_for(name))
    batches = iter(loader)
    for _ in range(len(loader)):
        x, y = next(batches)
        loss_fn(model(x), y).backward()
