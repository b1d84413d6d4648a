# The last micro-batch of each cycle (full or short) runs in optimizer.step's closure.
def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    optimizer.zero_grad()
    for start in range(0, len(batches), accum_steps):
        cycle = batches[start : start + accum_steps]
        for x, y in cycle[:-1]:
            (loss_fn(model(x), y) / len(cycle)).backward()
        x, y = cycle[-1]

        def closure(x=x, y=y, cycle=cycle):
            loss = loss_fn(model(x), y) / len(cycle)
            loss.backward()
            return loss

        optimizer.step(closure)
        optimizer.zero_grad()
