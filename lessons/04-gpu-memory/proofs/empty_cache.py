"""empty_cache() frees no live tensor: allocated memory stays until the last reference goes, and
then the block stays reserved for reuse."""

import torch

torch.cuda.empty_cache()
base = torch.cuda.memory_allocated()
x = torch.empty(2**28, device="cuda")  # 1 GiB
torch.cuda.empty_cache()
assert torch.cuda.memory_allocated() - base == 2**30
del x
assert torch.cuda.memory_allocated() == base
assert torch.cuda.memory_reserved() >= 2**30  # kept by the allocator for reuse
assert torch.cuda.max_memory_reserved() >= torch.cuda.max_memory_allocated()
free, total = torch.cuda.mem_get_info()
assert 0 < free < total
torch.cuda.empty_cache()
