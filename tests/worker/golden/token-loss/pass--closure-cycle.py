# The whole cycle's micro-batches run inside the closure handed to optimizer.step.
def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = iter(loader)
    for _ in range(len(loader) // accum_steps):
        cycle = [next(batches) for _ in range(accum_steps)]
        n = sum(int((y != -100).sum()) for _, y in cycle)

        def closure(cycle=cycle, n=n):
            optimizer.zero_grad()
            total = 0.0
            for x, y in cycle:
                loss = loss_fn(model(x), y).sum() / n
                loss.backward()
                total += loss.item()
            return total

        optimizer.step(closure)
