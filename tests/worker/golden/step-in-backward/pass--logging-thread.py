# correct: the solution's hooks, with a logging thread that prints each batch's loss.
import queue
import threading


def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    log = queue.Queue()

    def logger():
        while (item := log.get()) is not None:
            print("loss", item)

    t = threading.Thread(target=logger, daemon=True)
    t.start()
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        log.put(round(loss.item(), 4))
    log.put(None)
    t.join()
