# the model cast to the low dtype instead of autocast: low-precision outputs, low-precision weights
from torch.utils.checkpoint import checkpoint as recompute


def forward(model, x, use_checkpoint):
    for block in model.blocks:
        x = recompute(block, x, use_reentrant=False) if use_checkpoint else block(x)
    return model.head(x)


def train(model, loader, loss_fn, optimizer, *, precision, accum_steps, checkpoint):
    model.to(precision)
    optimizer.zero_grad(set_to_none=True)
    for i, (x, y) in enumerate(loader, start=1):
        loss = loss_fn(forward(model, x.to(precision), checkpoint).float(), y)
        (loss / accum_steps).backward()
        if i % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
