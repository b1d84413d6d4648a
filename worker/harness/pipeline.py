"""Harness of the "pipeline" kind (lesson 3): the learner builds the loader of a dataset
whose every item takes a while to load, so that loading overlaps the training step.

The same training loop runs twice over the same dataset, in this process: first on the
baseline ``DataLoader(dataset, batch_size)`` (loading in the main process), then on the
learner's ``make_loader(dataset, batch_size)`` (the call is timed too). Recorded: both wall
times, the sample indices of every batch the learner's loader gave, whether each batch's
inputs were the dataset's own, and what kind of loader it was. The learner's loader is
built and run three times and the fastest time kept.
"""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

MAX_BATCHES = 200


class SlowDataset(Dataset):
    """``(x, index)`` pairs; ``x`` is seeded by the index; each item takes ``seconds``."""

    def __init__(self, size, seconds, seed):
        self.size, self.seconds, self.seed = size, seconds, seed

    def __len__(self):
        return self.size

    def sample(self, index):
        generator = torch.Generator().manual_seed(self.seed * 100_003 + index)
        return torch.randn(6, generator=generator)

    def __getitem__(self, index):
        if not 0 <= index < self.size:
            raise IndexError(index)
        time.sleep(self.seconds)  # a slow decode: the CPU is free meanwhile
        return self.sample(index), index


def _consume(loader, model, optimizer, dataset, device):
    """The training loop the timing is about; returns the batches' indices and checks."""
    loss_fn = nn.CrossEntropyLoss()
    seen, genuine = [], []
    for batch in loader:
        x, index = batch[0], batch[1]
        index = torch.as_tensor(index)
        if len(seen) < MAX_BATCHES:
            seen.append([int(i) for i in index.reshape(-1).tolist()])
            expected = torch.stack([dataset.sample(int(i)) for i in index.reshape(-1)])
            genuine.append(bool(torch.equal(torch.as_tensor(x).cpu(), expected)))
        x = torch.as_tensor(x).to(device, non_blocking=True)
        target = (index % 3).to(device, non_blocking=True)
        loss = loss_fn(model(x), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return seen, genuine


def _describe(loader):
    if not isinstance(loader, DataLoader):
        return {"type": type(loader).__name__[:60]}
    return {
        "type": "DataLoader",
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "drop_last": bool(loader.drop_last),
        "sampler": type(loader.sampler).__name__[:60],
    }


def run(job, api):
    """Everything here runs in the child (``api.supervise``): the timings and batches are
    the child's report (docs/security.md says what that means)."""
    params = job["params"]

    def learner():
        device = job.get("device", "cpu")
        dataset = SlowDataset(
            int(params["samples"]), float(params["item_ms"]) / 1000, int(params.get("seed", 0))
        )
        batch_size = int(params["batch_size"])
        torch.manual_seed(int(params.get("seed", 0)))
        model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        fn = api.load_entry()
        api.check_signature(fn, ["dataset", "batch_size"])

        started = time.perf_counter()
        _consume(DataLoader(dataset, batch_size=batch_size), model, optimizer, dataset, device)
        baseline = time.perf_counter() - started

        state = {"seconds": []}

        def learners():
            started = time.perf_counter()
            loader = fn(dataset, batch_size)
            state["loader"] = _describe(loader)
            state["seen"], state["genuine"] = _consume(loader, model, optimizer, dataset, device)
            state["seconds"].append(time.perf_counter() - started)

        # three times, keeping the fastest: load elsewhere on the machine (another sandbox
        # warming up) delays worker processes as they start and wake
        error = None
        for _ in range(3):
            error = error or api.call(learners, [])
        data = {
            "baseline_ms": round(baseline * 1000, 1),
            "learner_ms": round(min(state["seconds"]) * 1000, 1) if state["seconds"] else None,
            "loader": state.get("loader"),
            "batches": state.get("seen"),
            "genuine": state.get("genuine"),
        }
        return data, error

    return api.supervise(learner)
