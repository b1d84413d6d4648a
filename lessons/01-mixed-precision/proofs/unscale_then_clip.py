"""After backward() on the scaled loss, .grad is multiplied by the scale; scaler.unscale_(optimizer)
brings it back to the true gradients, so the clip sees the real norm, and scaler.step then does not
divide a second time: the update is the one a loop without a scaler makes."""

import copy

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 2)
plain = copy.deepcopy(model)
x, y = torch.randn(8, 4), 10 * torch.randn(8, 2)


def norm(m):
    return torch.cat([p.grad.flatten() for p in m.parameters()]).norm()


plain_opt = torch.optim.SGD(plain.parameters(), lr=0.1)
nn.functional.mse_loss(plain(x), y).backward()
true_norm = norm(plain)
assert true_norm > 1.0  # so a max_norm of 1.0 clips
nn.utils.clip_grad_norm_(plain.parameters(), max_norm=1.0)
plain_opt.step()

opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
scaler.scale(nn.functional.mse_loss(model(x), y)).backward()
assert torch.isclose(norm(model), 1024 * true_norm, rtol=1e-4)  # still scaled
scaler.unscale_(opt)
assert torch.isclose(norm(model), true_norm, rtol=1e-4)  # the true gradients
nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
scaler.step(opt)  # does not divide by the scale again
scaler.update()
for a, b in zip(model.parameters(), plain.parameters(), strict=True):
    assert torch.allclose(a, b, atol=1e-6), (a, b)

# Two optimizers (a body and a head) and one scaler: unscale_ each, clip all, step each, update
# once; the update is again the one of the same loop without a scaler.
torch.manual_seed(1)
net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
plain_net = copy.deepcopy(net)
plain_opts = [torch.optim.SGD(plain_net[i].parameters(), lr=0.1) for i in (0, 2)]
nn.functional.mse_loss(plain_net(x), y).backward()
assert norm(plain_net) > 1.0
nn.utils.clip_grad_norm_(plain_net.parameters(), max_norm=1.0)
for o in plain_opts:
    o.step()

opts = [torch.optim.SGD(net[i].parameters(), lr=0.1) for i in (0, 2)]
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
scaler.scale(nn.functional.mse_loss(net(x), y)).backward()
for o in opts:
    scaler.unscale_(o)
nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)
for o in opts:
    scaler.step(o)
scaler.update()
assert scaler.get_scale() == 1024.0  # one clean update: the scale grows only after growth_interval
for a, b in zip(net.parameters(), plain_net.parameters(), strict=True):
    assert torch.allclose(a, b, atol=1e-6), (a, b)
