"""Harness of the "adapter" kind (lesson 5): the learner freezes a seeded float64 MLP and trains a
low-rank adapter beside its last layer.

``train(model, loader, loss_fn, make_optimizer, rank)``: ``make_optimizer(params)`` is the Adam the
learner must use. The model's own parameters are shared with the supervisor, which reads them as
each batch is fetched and at the end (frozen weights must never move). The adapter is made by the
learner's code, inside the child: what its optimizer holds is reported by the child at every step
(the values before and after the update, which parameters are the model's, which had a gradient,
the state it keeps), with the model's gradients alive at each batch. The checks replay the
adapter's training from the values it started with.
"""

import torch

from . import scenarios
from .instrument import flat, name_limits, wrap_step

MAX_STEPS = 200
MAX_ADAPTER = 4096  # numbers of adapter parameters reported per step


def _bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def run(job, api):
    params = job["params"]
    device = job.get("device", "cpu")
    scenario, weights, index = scenarios.placed(params, device)
    model, batches = scenario.model, scenario.micro_batches
    lr = float(params["lr"])
    api.share(weights)

    def learner():
        steps: list[dict] = []
        base_grads: list[int] = []
        optimizers: list[list[int]] = []
        state = {"batch": -1}

        def make_optimizer(group):
            group = list(group)
            optimizer = torch.optim.Adam(group, lr=lr)
            owned = [index.get(id(p), -1) for p in group]
            optimizers.append(owned)
            extra = [p for p, i in zip(group, owned, strict=True) if i < 0]
            record: dict = {}

            def before():
                record.clear()
                if len(steps) >= MAX_STEPS or sum(p.numel() for p in extra) > MAX_ADAPTER:
                    return
                record.update(
                    batch=state["batch"],
                    shapes=[list(p.shape) for p in extra],
                    before=flat(extra) if extra else [],
                    adapter_grads=[p.grad is not None for p in extra],
                    base_grads=[i for i, p in enumerate(weights) if p.grad is not None],
                    grad_bytes=_bytes([p.grad for p in [*weights, *extra] if p.grad is not None]),
                )

            def after(_result):
                if not record:
                    return
                with torch.no_grad():
                    record["after"] = flat(extra) if extra else []
                kept = [optimizer.state.get(p, {}) for p in group]
                record["base_state"] = sum(bool(s) for s, i in zip(kept, owned, strict=True) if i >= 0)
                record["state_bytes"] = _bytes(
                    [t for s in kept for k, t in s.items() if k != "step" and torch.is_tensor(t)]
                )
                steps.append(dict(record))

            wrap_step(optimizer, before, after)
            return optimizer

        def loader():
            for i, batch in enumerate(batches):
                base_grads.append(sum(p.grad is not None for p in weights))
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
        api.check_signature(fn, ["model", "loader", "loss_fn", "make_optimizer", "rank"])
        error = api.call(fn, [model, Loader(), scenario.loss_fn, make_optimizer, int(params["rank"])])
        base_grads.append(sum(p.grad is not None for p in weights))
        data = {
            "steps": steps,
            "base_grads": base_grads,
            "optimizers": optimizers[:16],
            "final_params": flat(weights),
        }
        return data, error

    return api.supervise(learner)
