# activations offloaded with save_on_cpu: on this device they stay live tensors, so the step is
# over budget (the prompt says offloaded copies count too)
import torch


def train_step(model, x, y, loss_fn, optimizer):
    with torch.autograd.graph.save_on_cpu():
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
