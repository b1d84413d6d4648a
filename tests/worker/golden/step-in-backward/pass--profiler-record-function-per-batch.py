# correct: the solution's hooks (a class keeping each parameter's Adam), each batch under
# record_function inside a profiler, and its summary table printed inside train
from torch.autograd import profiler


class HookStepper:
    def __init__(self, params, make_optimizer):
        self.optimizers = {id(p): make_optimizer([p]) for p in params}

    def __call__(self, p):
        self.optimizers[id(p)].step()
        p.grad = None


def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    stepper = HookStepper(params, make_optimizer)
    handles = [p.register_post_accumulate_grad_hook(stepper) for p in params]
    with profiler.profile() as prof:
        for i, (x, y) in enumerate(loader):
            with profiler.record_function(f"batch {i}"):
                loss_fn(model(x), y).backward()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=4))
    for handle in handles:
        handle.remove()
