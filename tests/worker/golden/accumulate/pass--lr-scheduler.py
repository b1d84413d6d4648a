# The accelerate-style loop: a micro-batch counter, the scheduler stepped once per update
# (a warm-up that has ended: the factor is 1 from the first update on).
from torch.optim.lr_scheduler import LambdaLR


def train(model, loader, loss_fn, optimizer, accum_steps):
    scheduler = LambdaLR(optimizer, lambda update: 1.0)
    seen = 0
    for inputs, targets in loader:
        loss = loss_fn(model(inputs), targets) / accum_steps
        loss.backward()
        seen += 1
        if seen % accum_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
