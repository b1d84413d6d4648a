import torch
from torch.utils.data import DataLoader


def make_loader(dataset, batch_size):
    return DataLoader(
        dataset,
        batch_size,
        shuffle=False,
        num_workers=4,
        prefetch_factor=4,
        pin_memory=torch.cuda.is_available(),
    )
