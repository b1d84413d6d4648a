# Gradients released in the hook, but nothing ever steps: the model does not move.
def train(model, loader, loss_fn, make_optimizer):
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda t: setattr(t, "grad", None))
    for x, y in loader:
        loss_fn(model(x), y).backward()
