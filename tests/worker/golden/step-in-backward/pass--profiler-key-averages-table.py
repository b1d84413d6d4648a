# correct (red team F3): the solution inside torch.profiler.profile, its summary table printed inside
# train; the profiler's first use (~7 MiB of code and lazy state) is paged in by the harness
import torch


def train(model, loader, loss_fn, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for x, y in loader:
            loss_fn(model(x), y).backward()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5))
