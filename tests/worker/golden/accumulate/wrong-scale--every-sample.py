# Divides each micro-batch's mean loss by accum_steps and by every sample the loader holds: the
# weights (1.7 % of a share) fell under the cut-off where a micro-batch counts as absent, and the
# update was named wrong-boundary.
def train(model, loader, loss_fn, optimizer, accum_steps):
    samples = sum(len(y) for _, y in loader)
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / (accum_steps * samples)).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
