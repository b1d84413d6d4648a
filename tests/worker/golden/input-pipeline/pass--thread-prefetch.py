from concurrent.futures import ThreadPoolExecutor

import torch


def make_loader(dataset, batch_size):
    """Load items in threads (the loading sleeps, so threads overlap) and batch them in order."""

    def batches():
        with ThreadPoolExecutor(max_workers=8) as pool:
            items = pool.map(dataset.__getitem__, range(len(dataset)))
            batch = []
            for item in items:
                batch.append(item)
                if len(batch) == batch_size:
                    yield torch.stack([x for x, _ in batch]), torch.tensor([i for _, i in batch])
                    batch = []
            if batch:
                yield torch.stack([x for x, _ in batch]), torch.tensor([i for _, i in batch])

    return batches()
