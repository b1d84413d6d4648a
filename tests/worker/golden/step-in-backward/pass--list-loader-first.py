# Every batch taken first (`list(loader)`), then one backward each; hooks in a dict by name.
def train(model, loader, loss_fn, make_optimizer):
    batches = list(loader)
    named = dict(model.named_parameters())
    optimizers = {name: make_optimizer([p]) for name, p in named.items()}
    for name, p in named.items():

        def hook(param, name=name):
            optimizers[name].step()
            param.grad = None

        p.register_post_accumulate_grad_hook(hook)
    for x, y in batches:
        loss_fn(model(x), y).backward()
