# wrong: two micro-batches' graphs alive at once (one backward per pair), on a thread (meter blind).
import threading


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    for c in range(len(batches) // accum_steps):
        cycle = batches[c * accum_steps : (c + 1) * accum_steps]
        n_tokens = sum(int((y != -100).sum()) for _, y in cycle)
        optimizer.zero_grad()
        for p in range(0, accum_steps, 2):

            def run(chunk=cycle[p : p + 2], n_tokens=n_tokens):
                (sum(loss_fn(model(x), y).sum() for x, y in chunk) / n_tokens).backward()

            t = threading.Thread(target=run)

            t.start()

            t.join()
        optimizer.step()
