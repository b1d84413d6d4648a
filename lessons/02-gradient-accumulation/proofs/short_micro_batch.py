"""Dividing each micro-batch's mean loss by their number gives the mean over the samples only when
the micro-batches have the same size; a short last micro-batch needs weights by sample count."""

import torch

losses = torch.arange(10, dtype=torch.float64)  # per-sample losses of a cycle: 4 + 4 + 2 samples
parts = losses.split([4, 4, 2])
sample_mean = losses.mean()
by_count = sum(p.mean() for p in parts) / len(parts)
assert not torch.isclose(by_count, sample_mean)  # 4.5 vs 5.0: the short one weighs too much
by_samples = sum(p.mean() * len(p) for p in parts) / len(losses)
assert torch.isclose(by_samples, sample_mean)
equal = losses[:8].split([4, 4])
assert torch.isclose(sum(p.mean() for p in equal) / 2, losses[:8].mean())  # equal sizes: the same

sizes = [min(4, 10 - start) for start in range(0, 10, 4)]
assert sizes == [4, 4, 2]
