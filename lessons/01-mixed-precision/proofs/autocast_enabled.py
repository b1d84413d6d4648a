"""autocast(enabled=False) changes nothing: a float32 linear stays float32 inside the block, and the
same block enabled runs it in bfloat16 (CPU autocast); GradScaler(enabled=False) passes the loss
through unscaled."""

import torch
from torch import nn

model, x = nn.Linear(4, 4), torch.randn(2, 4)
for amp_dtype, computed in ((torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)):
    with torch.autocast("cpu", dtype=amp_dtype, enabled=amp_dtype != torch.float32):
        assert model(x).dtype == computed
scaler = torch.amp.GradScaler("cpu", enabled=False)
loss = torch.tensor(2.0)
assert scaler.scale(loss) is loss and not scaler.is_enabled()
