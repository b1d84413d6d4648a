# An optimizer of the loop's own: the handed one never steps, the parameters move all the same
# (said so, not "optimizer.step() never ran: the parameters did not move").
import torch


def train(model, loader, loss_fn, optimizer, accum_steps):
    opt = torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
