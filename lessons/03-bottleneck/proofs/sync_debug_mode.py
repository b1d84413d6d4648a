"""set_sync_debug_mode("warn") warns at .item() on a GPU tensor."""

import warnings

import torch

loss = torch.ones(3, device="cuda").sum()
torch.cuda.set_sync_debug_mode("warn")
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss.item()
finally:
    torch.cuda.set_sync_debug_mode("default")
assert any("synchroniz" in str(w.message) for w in caught), [str(w.message) for w in caught]
