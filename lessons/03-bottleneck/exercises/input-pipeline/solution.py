import torch
from torch.utils.data import DataLoader


def make_loader(dataset, batch_size):
    """The loader the training loop iterates over: same batches, loaded faster."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=2,  # two processes load the next batches while this one trains
        pin_memory=torch.cuda.is_available(),  # page-locked batches copy to the GPU asynchronously
    )
