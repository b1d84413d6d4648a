"""DataLoader defaults: num_workers=0 (the main process loads), prefetch_factor 2 per worker once
there are workers, persistent_workers off."""

import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(8))
plain = DataLoader(data)
assert plain.num_workers == 0 and plain.prefetch_factor is None
assert plain.persistent_workers is False
workers = DataLoader(data, num_workers=2)  # no process starts until it is iterated
assert workers.prefetch_factor == 2
