"""float16: largest 65504, smallest (subnormal) 2**-24 ~ 5.96e-8, zero below about 3e-8;
bfloat16 keeps 1e-8 but not the 2**-8 of 1 + 2**-8; scaling by 65536 brings 1e-8 back into range."""

import torch

half = torch.finfo(torch.float16)
assert half.max == 65504
smallest = torch.tensor(2.0**-24)
assert smallest.to(torch.float16).item() == 2.0**-24  # ~5.96e-8 is kept
assert abs(2.0**-24 - 5.96e-8) < 1e-10
assert torch.tensor(2.0**-25).to(torch.float16).item() == 0  # ~2.98e-8 rounds to zero
assert torch.tensor(2.9e-8).to(torch.float16).item() == 0
assert torch.tensor(3.1e-8).to(torch.float16).item() == 2.0**-24

tiny = torch.tensor(1e-8)
assert tiny.to(torch.float16).item() == 0
assert abs(tiny.to(torch.bfloat16).item() - 1e-8) < 1e-10
assert torch.finfo(torch.bfloat16).max > 3e38  # float32's range
assert (torch.tensor(1 + 2**-8).to(torch.bfloat16) == 1).item()
assert abs((tiny * 65536).to(torch.float16).item() - 6.55e-4) < 1e-6
