"""With micro-batches of different token counts, the mean of the micro-batches' means is not the
mean over all tokens; summing the token losses and dividing by the cycle's token count is."""

import torch

tokens = [torch.tensor([1.0, 1.0, 1.0]), torch.tensor([4.0] * 9)]  # 3 and 9 real tokens
mean_of_means = sum(t.mean() for t in tokens) / len(tokens)
n_tokens = sum(len(t) for t in tokens)
token_mean = torch.cat(tokens).mean()
assert mean_of_means.item() == 2.5 and token_mean.item() == 3.25
assert torch.isclose(sum(t.sum() for t in tokens) / n_tokens, token_mean)
same = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])]  # equal counts: the two agree
assert torch.isclose(sum(t.mean() for t in same) / 2, torch.cat(same).mean())
