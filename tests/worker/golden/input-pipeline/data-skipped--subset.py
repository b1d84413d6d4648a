from torch.utils.data import DataLoader, Subset


def make_loader(dataset, batch_size):
    full = len(dataset) // batch_size * batch_size  # only full batches: no ragged tail
    return DataLoader(Subset(dataset, range(full)), batch_size=batch_size, num_workers=2)
