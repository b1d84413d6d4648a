"""Harness of the "checkpointing" kind (lesson 4): the learner's ``train_step`` must fit a
memory budget (activation checkpointing) while computing the same gradients.

``train_step(model, x, y, loss_fn, optimizer)`` runs once per batch on a seeded float64
``BlockNet``. Recorded: the peak bytes of live tensors during each call (every tensor an
op creates, recomputation included; parameters left out), the gradient at every optimizer
step, whether gradients were still held after each call, and the order of block forwards
(F, with whether backward was running: a recomputation) and of gradients reaching each
block (G).
"""

import torch
from torch.utils import _python_dispatch

from . import memory, scenarios, supervise
from .instrument import flat, name_limits, wrap_step

MAX_EVENTS = 2000


def _backward_running():
    return torch._C._current_autograd_node() is not None


def run(job, api):
    """The model is built here, in the supervisor, and its parameters shared; the rest runs in
    the child (``learner``). The supervisor reads the parameters before every call and at the
    end (plain SGD: the step it saw is the gradient times the learning rate) and keeps each
    call's meter peak as the counts come."""
    params = job["params"]
    device = job.get("device", "cpu")
    model, batches, loss_fn = scenarios.block_net(params)
    model = model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    sized = scenarios.memory_params(params)
    big = None
    if sized is not None:  # the memory run's model and batch: the kernel's figures go by it
        supervise.exact_malloc()
        big_model, [big], _ = scenarios.block_net(sized)
        big_model = big_model.to(device)
        big = (big_model, big[0].to(device), big[1].to(device))
    # the memory run's parameters after the calls' (the checks part them)
    api.share(weights + (list(big[0].parameters()) if big is not None else []))

    def learner():
        events: list = []
        steps: list = []

        def event(*item):
            if len(events) < MAX_EVENTS:
                events.append(list(item))

        for index, block in enumerate(model.blocks):
            block.register_forward_pre_hook(lambda m, a, index=index: event("F", index, _backward_running()))
            next(block.parameters()).register_post_accumulate_grad_hook(
                lambda p, index=index: event("G", index)
            )

        def recorded_step():
            event("S")
            with _python_dispatch._disable_current_modes():  # the copy is ours: not metered
                steps.append(
                    {
                        "grad": flat(
                            [p.grad if p.grad is not None else torch.zeros_like(p) for p in weights]
                        ),
                        "missing": [i for i, p in enumerate(weights) if p.grad is None],
                    }
                )

        wrap_step(optimizer, recorded_step)
        if big is not None:
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        name_limits(alone=api.alone)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "x", "y", "loss_fn", "optimizer"])
        peaks: list = []
        kept: list = []
        error = None
        for x, y in batches:
            event("call")
            api.sync("call", len(peaks), snapshot=True)
            meter = memory.LiveTensorMeter(weights, api.meter_report(), inputs=(x, y))
            with meter:
                error = api.call(fn, [model, x, y, loss_fn, optimizer])
            peaks.append(meter.peak)
            kept.append(sum(p.grad is not None for p in weights))
            if error is not None:
                break
        if big is not None and error is None:
            error = _memory_run(api, fn, big, loss_fn, float(params["lr"]))
        data = {
            "peaks": peaks,
            "grads_kept": kept,
            "steps": steps,
            "events": events,
            "final_params": flat(weights),
            "blocks": len(model.blocks),
            "grad_bytes": sum(p.numel() * p.element_size() for p in weights),
        }
        return data, error

    return api.supervise(learner, alone=True)


def _memory_run(api, fn, big, loss_fn, lr):
    """``train_step`` once more, on one large batch and a fresh model with a plain SGD, between
    two syncs where the supervisor reads the parameters and the kernel's figures of the
    process's memory (``Observer.watch``): what a pass on the budget rests on. No meter."""
    model, x, y = big
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    api.sync("memory-start", snapshot=True)
    error = api.call(fn, [model, x, y, loss_fn, optimizer])
    api.sync("memory-end", snapshot=True)
    return error  # its meters see this thread of this process only
