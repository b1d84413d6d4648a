# Per-parameter optimizers, each with its own LambdaLR stepped in the hook (the torch tutorial
# "How to save memory by fusing the optimizer step into the backward pass").
from torch.optim.lr_scheduler import LambdaLR


def train(model, loader, loss_fn, make_optimizer):
    optimizer_dict = {p: make_optimizer([p]) for p in model.parameters()}
    scheduler_dict = {p: LambdaLR(o, lambda s: 1.0) for p, o in optimizer_dict.items()}

    def optimizer_hook(parameter) -> None:
        optimizer_dict[parameter].step()
        scheduler_dict[parameter].step()
        optimizer_dict[parameter].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    for x, y in loader:
        loss_fn(model(x), y).backward()
