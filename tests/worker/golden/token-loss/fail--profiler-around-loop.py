# torch.profiler around the whole loop: refused with a named limit here. This exercise has no
# memory run, so its memory rests on the meter of bytes saved for backward, which sees one
# thread: the loop runs on that thread alone (accumulate and remainder, graded from the kernel's
# count, allow the profiler's thread).
from torch.profiler import ProfilerActivity, profile


def train(model, loader, loss_fn, optimizer, accum_steps):
    total = len(loader)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step, (x, y) in enumerate(loader):
            start = step - step % accum_steps
            (loss_fn(model(x), y) / min(accum_steps, total - start)).backward()
            if (step + 1) % accum_steps == 0 or step + 1 == total:
                optimizer.step()
                optimizer.zero_grad()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=5))
