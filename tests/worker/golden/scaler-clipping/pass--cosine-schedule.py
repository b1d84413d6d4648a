# timm-style: cosine annealing over many epochs (flat within this one), stepped per update
# after the scaler's step and update.
from torch.nn.utils import clip_grad_norm_
from torch.optim.lr_scheduler import CosineAnnealingLR


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    scheduler = CosineAnnealingLR(optimizer, T_max=10**9)
    for index, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y) / accum_steps).backward()
        if index % accum_steps != accum_steps - 1:
            continue
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
