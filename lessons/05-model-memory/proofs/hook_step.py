"""register_post_accumulate_grad_hook: once per parameter per backward, .grad filled when it fires
(a parameter used twice still fires once); an Adam step per parameter there, then .grad = None,
ends at the plain loop's parameters with never more than one gradient alive."""

import copy

import torch
from torch import nn


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(5, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, x):
        return self.out(torch.tanh(self.inner(torch.tanh(self.inner(x)))))  # inner used twice


torch.manual_seed(0)
plain = Tied().double()
hooked = copy.deepcopy(plain)
start = copy.deepcopy(plain)
batches = [(torch.randn(8, 5, dtype=torch.float64), torch.randint(0, 2, (8,))) for _ in range(3)]
loss_fn = nn.CrossEntropyLoss()

optimizer = torch.optim.Adam(plain.parameters(), lr=0.01)
for x, y in batches:
    loss_fn(plain(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()

params = list(hooked.parameters())
optimizers = {p: torch.optim.Adam([p], lr=0.01) for p in params}
fired, alive = [], []


def step_now(p):
    assert p.grad is not None
    fired.append(p)
    alive.append(sum(q.grad is not None for q in params))
    optimizers[p].step()
    p.grad = None


for p in params:
    p.register_post_accumulate_grad_hook(step_now)
for x, y in batches:
    fired.clear()
    loss_fn(hooked(x), y).backward()
    assert sorted(map(id, fired)) == sorted(map(id, params))  # each exactly once

assert max(alive) == 1
for a, b in zip(plain.parameters(), hooked.parameters(), strict=True):
    assert torch.allclose(a, b, rtol=0, atol=1e-12)

# The card's form: one optimizer per parameter caught by its closure, opt.zero_grad() (set_to_none,
# the default) frees .grad in the hook; the same parameters, one gradient alive; removing the
# handles gives the plain backward back (every .grad filled, nothing stepped).
closured = start
cparams = list(closured.parameters())
alive_now, handles = [], []
for p in cparams:
    opt = torch.optim.Adam([p], lr=0.01)

    def step_in_hook(param, opt=opt):
        alive_now.append(sum(q.grad is not None for q in cparams))
        opt.step()
        opt.zero_grad()
        assert param.grad is None

    handles.append(p.register_post_accumulate_grad_hook(step_in_hook))
for x, y in batches:
    loss_fn(closured(x), y).backward()
assert max(alive_now) == 1
for a, b in zip(plain.parameters(), closured.parameters(), strict=True):
    assert torch.allclose(a, b, rtol=0, atol=1e-12)
for h in handles:
    h.remove()
before = [q.detach().clone() for q in cparams]
loss_fn(closured(batches[0][0]), batches[0][1]).backward()
assert all(q.grad is not None for q in cparams)
assert all(torch.equal(q, b) for q, b in zip(cparams, before, strict=True))
