# Hooks as lambdas over a list of optimizers, their handles kept and removed at the end.
def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = [make_optimizer([p]) for p in params]
    handles = []
    for p, opt in zip(params, optimizers, strict=True):

        def hook(param, opt=opt):
            opt.step()
            opt.zero_grad(set_to_none=True)

        handles.append(p.register_post_accumulate_grad_hook(hook))
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
    for handle in handles:
        handle.remove()
