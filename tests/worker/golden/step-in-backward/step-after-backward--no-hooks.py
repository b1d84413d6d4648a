# Per-parameter optimizers but no hook at all: each steps after backward, then zeroes.
def train(model, loader, loss_fn, make_optimizer):
    optimizers = [make_optimizer([p]) for p in model.parameters()]
    for x, y in loader:
        loss_fn(model(x), y).backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
