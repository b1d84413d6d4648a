"""Harness of the "pipeline" kind (lesson 3): the learner builds the loader of a dataset
whose every item takes a while to load, so that loading overlaps the training step.

The items are the supervisor's (``api.serve_items``): each is asked for over a connection of
the process that loads it and answered ``item_ms`` after the question, with values drawn from a
seed the supervisor makes at the start of each run, after the fork. The learner's process cannot
make them, nor shorten the wait; it can only ask for many at once, which is the lesson.

The same training loop (``scenarios.pipeline_step``) runs over the same dataset, in this process:
first on the baseline ``DataLoader(dataset, batch_size)`` (loading in the main process), before
the learner's file is imported; then ``params["attempts"]`` times (three: the grader sends the
number the checks judge, ``worker/checks/pipeline.py`` ``job_inputs``) on the learner's
``make_loader(dataset, batch_size)`` (the call is timed too). Each run begins with a ``run``
sync and ends with a ``done`` sync, where the supervisor reads the model's parameters and the
time: the checks redo each run's steps from its seed and call the loader right only where they
end on the same parameters. Reported, for the diagnoses: the sample indices of every batch the
learner's loader gave, and what kind of loader it was.
"""

import os
import socket
import struct
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset

from . import scenarios, sharing
from .instrument import name_limits

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_BATCHES = 200
ASK = struct.Struct("!I")


class ServedDataset(Dataset[tuple[torch.Tensor, int]]):
    """``(x, index)`` pairs; ``x`` comes from the supervisor, ``item_ms`` after it is asked for
    (a slow decode: the CPU is free meanwhile). Each process and thread asks on its own
    connection, made on first use."""

    def __init__(self, size: int, address: bytes) -> None:
        self.size, self.address = size, address
        self._local = threading.local()

    def __len__(self) -> int:
        return self.size

    def __getstate__(self) -> dict[str, Any]:  # a loader worker started by spawn makes its own connection
        return {"size": self.size, "address": self.address}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["size"], state["address"])

    def _connection(self) -> socket.socket:
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            local.sock.connect(self.address)
            local.pid = os.getpid()
        return local.sock

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= int(index) < self.size:
            raise IndexError(index)
        sock = self._connection()
        sock.sendall(ASK.pack(int(index)))
        answer = b""
        while len(answer) < 1 + scenarios.ITEM.size:
            chunk = sock.recv(1 + scenarios.ITEM.size - len(answer))
            if not chunk:
                raise ConnectionError("the dataset's server closed the connection")
            answer += chunk
        if answer[0] != 0:
            raise IndexError(index)
        return torch.tensor(scenarios.ITEM.unpack(answer[1:])), index


def _consume(
    loader: Iterable[Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: str
) -> list[list[int]]:
    """The training loop the timing is about; returns the batches' indices."""
    seen: list[list[int]] = []
    for batch in loader:
        x, index = batch[0], torch.as_tensor(batch[1])
        if len(seen) < MAX_BATCHES:
            seen.append([int(i) for i in index.reshape(-1).tolist()])
        scenarios.pipeline_step(model, optimizer, torch.as_tensor(x).to(device, non_blocking=True), index)
    return seen


def _describe(loader: object) -> dict[str, Any]:
    if not isinstance(loader, DataLoader):
        return {"type": type(loader).__name__[:60]}
    return {
        "type": "DataLoader",
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "drop_last": bool(loader.drop_last),
        "sampler": type(loader.sampler).__name__[:60],
    }


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The loops run in the child (``api.supervise``); what the checks time and verify is the
    supervisor's: the items it served and the parameters it read at each run's end."""
    params = spec["params"]
    device = spec.get("device", "cpu")
    samples, batch_size = int(params["samples"]), int(params["batch_size"])
    items = api.serve_items(
        samples, float(params["item_ms"]) / 1000, scenarios.pipeline_item, scenarios.ITEM.size
    )
    layout = sharing.layout(scenarios.pipeline_model().parameters())  # what the child hands over

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        # the set-up, before the learner's file is loaded: the model, its parameters handed over
        torch.manual_seed(int(params.get("seed", 0)))
        trained = scenarios.pipeline_model().to(device)
        api.hand_off(trained.parameters())
        optimizer = torch.optim.SGD(trained.parameters(), lr=scenarios.PIPELINE_LR)
        dataset = ServedDataset(samples, items.address)

        api.sync("run", 0, snapshot=True)  # the baseline, before any of the learner's code
        _consume(DataLoader(dataset, batch_size=batch_size), trained, optimizer, device)
        api.sync("done", 0, snapshot=True)

        name_limits()
        # the learner's file imports as ``submission`` in a worker started fresh (spawn or
        # forkserver), where a function of it (a worker_init_fn, a collate_fn) is unpickled by name
        if api.work_dir not in sys.path:
            sys.path.append(api.work_dir)
        fn = api.load_entry()
        api.check_signature(fn, ["dataset", "batch_size"])
        state: dict[str, Any] = {"attempts": 0}

        def learners() -> None:
            loader = fn(dataset, batch_size)
            state["loader"] = _describe(loader)
            state["seen"] = _consume(loader, trained, optimizer, device)
            api.sync("done", state["attempts"] + 1, snapshot=True)
            state["attempts"] += 1

        # several times, keeping the fastest: load elsewhere on the machine (another sandbox
        # warming up) delays worker processes as they start and wake
        error = None
        for attempt in range(1, int(params["attempts"]) + 1):
            if error is None:
                api.sync("run", attempt, snapshot=True)
                error = api.call(learners, [])
        data = {
            "attempts": state["attempts"],
            "loader": state.get("loader"),
            "batches": state.get("seen"),
        }
        return data, error

    return api.supervise(learner, layout=layout, device=device)
