"""is_bf16_supported() counts emulation; including_emulation=False answers native support, which
starts at compute capability 8.0."""

import torch

major, _minor = torch.cuda.get_device_capability()
assert torch.cuda.is_bf16_supported(including_emulation=False) == (major >= 8)
assert torch.cuda.is_bf16_supported()  # with emulation, every CUDA card says yes
