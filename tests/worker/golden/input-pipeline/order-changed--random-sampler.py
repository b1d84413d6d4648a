from torch.utils.data import DataLoader, RandomSampler


def make_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset), num_workers=3)
