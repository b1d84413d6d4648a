from torch.utils.data import DataLoader


def make_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size)
