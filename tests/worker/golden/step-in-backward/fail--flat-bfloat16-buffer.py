# Every gradient kept, as bfloat16, in one flat buffer allocated before the loop (6 MiB); all of
# them stepped in the last hook, each upcast into .grad one at a time: 63.3 MiB, under the line of
# 66.1 (reported passing); 3e-6 (relative) away after the first batch, refused within 1e-9 already.
import torch


def train(model, loader, loss_fn, make_optimizer):
    params = list(model.parameters())
    optimizers = [make_optimizer([p]) for p in params]
    index = {p: i for i, p in enumerate(params)}
    offsets = [0]
    for p in params:
        offsets.append(offsets[-1] + p.numel())
    buffer = torch.empty(offsets[-1], dtype=torch.bfloat16)
    done = set()

    def hook(p):
        i = index[p]
        buffer[offsets[i] : offsets[i + 1]].copy_(p.grad.reshape(-1))
        p.grad = None
        done.add(i)
        if len(done) == len(params):
            done.clear()
            for j, q in enumerate(params):
                q.grad = buffer[offsets[j] : offsets[j + 1]].view_as(q).to(q.dtype)
                optimizers[j].step()
                q.grad = None

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    for x, y in loader:
        loss_fn(model(x), y).backward()
