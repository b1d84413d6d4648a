"""On CUDA, under save_on_cpu(pin_memory=True) the tensors autograd saves leave the GPU during forward
(what forward leaves allocated drops to a fraction) and backward gives the same gradients."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(8)]).cuda()
x = torch.randn(4096, 1024, device="cuda")
layer_output = 4096 * 1024 * 4  # 16 MiB: each layer saves two of them (the Linear's, the GELU's input)


def step(offload: bool) -> tuple[int, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else torch.enable_grad():
        loss = model(x).pow(2).mean()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before
    loss.backward()
    return held, [p.grad.clone() for p in model.parameters()]


plain_held, plain_grads = step(offload=False)
offload_held, offload_grads = step(offload=True)
assert plain_held >= 12 * layer_output, plain_held
assert offload_held < plain_held / 4, (offload_held, plain_held)
assert all(torch.allclose(a, b) for a, b in zip(plain_grads, offload_grads, strict=True))
