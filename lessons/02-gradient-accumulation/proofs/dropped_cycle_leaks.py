"""Two epochs of 10 micro-batches with accum_steps = 4 and the short last cycle dropped: the loop
that zeroes right after the step (as "The whole pattern" does) carries the dropped cycle's
gradients into the next epoch's first update; the loop that zeroes at the start of each cycle
(step % accum_steps == 0) clears them there, and that update is the clean cycle's."""

import copy

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(3, 1).double()
batches = [
    (torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 1, dtype=torch.float64)) for _ in range(10)
]
accum_steps, lr = 4, 0.1


def first_update_of_epoch_two(zero_at_start):
    m = copy.deepcopy(model)
    optimizer = torch.optim.SGD(m.parameters(), lr=lr)
    for epoch in range(2):
        for step, (x, y) in enumerate(batches):
            if zero_at_start and step % accum_steps == 0:
                optimizer.zero_grad()
            (nn.functional.mse_loss(m(x), y) / accum_steps).backward()
            if (step + 1) % accum_steps == 0:  # the short cycle (steps 8, 9) never steps
                if epoch == 1:
                    return [p.grad.clone() for p in m.parameters()], m
                optimizer.step()
                if not zero_at_start:
                    optimizer.zero_grad()
    raise AssertionError("unreachable")


def clean_cycle_gradient(m):
    """The first cycle of epoch two alone, at the parameters it ran with."""
    m = copy.deepcopy(m)
    m.zero_grad()
    for x, y in batches[:accum_steps]:
        (nn.functional.mse_loss(m(x), y) / accum_steps).backward()
    return [p.grad for p in m.parameters()]


after, m_after = first_update_of_epoch_two(zero_at_start=False)
start, m_start = first_update_of_epoch_two(zero_at_start=True)
leaked = [a - c for a, c in zip(after, clean_cycle_gradient(m_after), strict=True)]
assert max(g.abs().max().item() for g in leaked) > 1e-3  # the dropped cycle's gradients are in it
assert all(
    torch.allclose(a, c, atol=1e-12) for a, c in zip(start, clean_cycle_gradient(m_start), strict=True)
)
