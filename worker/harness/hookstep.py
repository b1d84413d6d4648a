"""Harness of the "hookstep" kind (lesson 5): the learner's loop updates each parameter
in its ``register_post_accumulate_grad_hook``, so that one parameter's gradient is alive at a time.

``train(model, loader, loss_fn, make_optimizer)`` runs one pass over the seeded float64 MLP's
batches; ``make_optimizer(params)`` is the Adam the learner must use (one per parameter). The
supervisor reads the parameters as each batch is fetched and at the end (the trajectory); the
child reports every optimizer step: the batch, whether backward was running, which of the
optimizer's parameters had a gradient, and how many gradients (and bytes) were alive then; and
how many were alive as each batch was fetched (after the previous backward).
"""

import scenarios
import torch
from instrument import flat, name_limits, wrap_step

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
    api.share(weights)

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

        name_limits()
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer"])
        error = api.call(fn, [model, Loader(), scenario.loss_fn, make_optimizer])
        between.append(_alive(weights)[0])
        data = {
            "steps": steps,
            "between": between,
            "n_params": len(weights),
            "grad_bytes": sum(p.numel() * p.element_size() for p in weights),
            "final_params": flat(weights),
        }
        return data, error

    return api.supervise(learner)
