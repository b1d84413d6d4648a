"""Harness of the "hookstep" kind (lesson 5): the learner's loop updates each parameter
in its ``register_post_accumulate_grad_hook``, so that one parameter's gradient is alive at a time.

``train(model, loader, loss_fn, make_optimizer)`` runs one pass over the seeded float64 MLP's
batches; ``make_optimizer(params)`` is the Adam the learner must use (one per parameter). The
supervisor reads the parameters as each batch is fetched and at the end (the trajectory); the
child reports every optimizer step: the batch, whether backward was running, which of the
optimizer's parameters had a gradient, and how many gradients (and bytes) were alive then; and
how many were alive as each batch was fetched (after the previous backward).
"""

import torch

from . import memory, scenarios, supervise
from .instrument import flat, name_limits, wrap_step

MAX_STEPS = 2000


def _alive(weights):
    grads = [p.grad for p in weights if p.grad is not None]
    return len(grads), sum(g.numel() * g.element_size() for g in grads)


def run(job, api):
    params = job["params"]
    device = job.get("device", "cpu")
    scenario, weights, index = scenarios.placed(params, device)
    model, batches = scenario.model, scenario.micro_batches
    lr = float(params["lr"])
    wide = memory.wide_scenario(params)
    if wide is not None:  # the memory run's model: the kernel's figures go by it
        supervise.exact_malloc()
        wide = (wide[0].to(device), [(x.to(device), y.to(device)) for x, y in wide[1]], wide[2])
    # after the scenario's parameters, the memory run's biases (its weights, 16 MiB each, would
    # not fit in a trace): each moves only where its layer's gradient reached it (the checks
    # part them)
    api.share(weights + (memory.biases(wide[0]) if wide is not None else []))

    def learner():
        steps: list[list] = []
        between: list[int] = []
        state = {"batch": -1}

        def make_optimizer(group):
            group = list(group)
            optimizer = torch.optim.Adam(group, lr=lr)
            owned = [index.get(id(p), -1) for p in group]

            def recorded():
                if len(steps) < MAX_STEPS:
                    alive, nbytes = _alive(weights)
                    stepped = [i for i, p in zip(owned, group, strict=True) if p.grad is not None]
                    backward = torch._C._current_autograd_node() is not None
                    steps.append([state["batch"], backward, stepped, alive, nbytes])

            wrap_step(optimizer, recorded)
            return optimizer

        def loader():
            for i, batch in enumerate(batches):
                between.append(_alive(weights)[0])
                api.sync("batch", i, snapshot=True)
                state["batch"] = i
                yield batch

        class Loader:
            def __len__(self):
                return len(batches)

            def __iter__(self):
                return loader()

        if wide is not None:
            api.sync(supervise.WATCH)  # before the learner's file runs: it cannot be left out
        name_limits(alone=api.alone)
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer"])
        error = api.call(fn, [model, Loader(), scenario.loss_fn, make_optimizer])
        between.append(_alive(weights)[0])
        final = flat(weights)
        if wide is not None and error is None:
            error = _memory_run(api, fn, wide, lr)
        data = {
            "steps": steps,
            "between": between,
            "n_params": len(weights),
            "grad_bytes": sum(p.numel() * p.element_size() for p in weights),
            "final_params": final,
        }
        return data, error

    # alone: no thread or process of its own, whose memory the kernel would count apart from the
    # child's (a loop run in a forked process could write the parameters back unseen)
    return api.supervise(learner, alone=True)


def _memory_run(api, fn, wide, lr):
    """``train`` once more, on the wide model and its one batch, each ``make_optimizer`` a plain
    Adam, between two syncs where the supervisor reads the parameters and the kernel's figures
    of the process's memory (``Observer.watch``): what a pass on live gradients rests on."""
    model, batches, loss_fn = wide

    def make_optimizer(group):
        return torch.optim.Adam(list(group), lr=lr)

    api.sync("memory-start", snapshot=True)
    error = api.call(fn, [model, scenarios.Loader(batches), loss_fn, make_optimizer])
    api.sync("memory-end", snapshot=True)
    return error
