# right: after each update the loss of the last micro-batch is printed at the new parameters,
# with a plain forward (no torch.no_grad()): its graph is never backwarded, only dropped. Red
# team 8: the grader's own saved-tensor meter held such a graph for good (a saved output kept with
# its grad_fn), the kernel counted it, and forwards outnumbered backwards: "backward once per
# cycle". Now the meter holds what it saves detached, and only forwards a backward reached count.
def train(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            print(f"update {(i + 1) // accum_steps}: loss {loss_fn(model(x), y).item():.4f}")
