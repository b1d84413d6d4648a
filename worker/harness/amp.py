"""Harness of the "amp" kind (lesson 1): runs the learner's AMP loop on a
float32 MLP whose batches include one with an inf, and records what it did.

Recorded: the dtype every ``nn.Linear`` produced (in all, and in each forward) and every loss
had (and whether autocast was on when the loss was computed); the order of loss calls (L),
backwards (B), clipping (C), optimizer steps (S), zero_grad (Z) and GradScaler calls; before
every forward, which batch it is, the parameters and the scale, whether gradients were on
(``grad``) and, once a backward reaches its output, that it trained (``trained``): the check
takes the readings at
the forward each batch trained on, so a forward that only looks (an evaluation before the
loop, a loss logged under ``no_grad``, a warm-up pass) does not stand for the batch (issue 41,
red team 5 R4); the gradient norm each clip saw and the one each optimizer step received,
with the batch whose backward ran last (what flowed, not only the calls: the checks compare
them with the true gradient); the end state.

Observed by the supervisor: the parameters before every forward and at the end, and the
GradScaler's scale beside them (the last number of each reading). The scale is a tensor the
scaler makes at its first ``scale()``; it is moved then into memory the supervisor reads
(``_share_scale``), so the scale a step was skipped under, halved or doubled, is the
supervisor's reading, not the child's word.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from . import scenarios, sharing
from .instrument import finite, flat, name_limits, patch_clip, watch_scaler, wrap_method, wrap_step

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_EVENTS = 2000
MAX_SNAPSHOTS = 128  # forwards read (the supervisor reads up to 256 snapshots)

SIGNATURE = ["model", "loader", "loss_fn", "optimizer", "scaler", "device_type", "amp_dtype", "max_norm"]


class Recorder:
    def __init__(self, model: torch.nn.Module, scaler: torch.amp.GradScaler) -> None:
        self.params = list(model.parameters())
        self.scaler = scaler
        self.events: list[list[Any]] = []
        self.snapshots: list[dict[str, Any]] = []  # before every forward: batch, parameters, scale
        self.linear_dtypes: dict[str, int] = {}
        self.loss_dtypes: dict[str, int] = {}
        self.loss_autocast = {"on": 0, "off": 0}
        self.clips: list[dict[str, Any]] = []
        self.step_norms: list[dict[str, Any]] = []  # the gradient norm each optimizer.step() received
        self.batch = -1  # the batch of the latest forward
        self.trained = -1  # the batch of the latest forward a backward reached
        self.forward = -1  # the snapshot of the forward running now (-1: none recorded)
        self.unscaled = False

    def event(self, *item: Any) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append(list(item))

    def scale(self) -> float:
        return float(self.scaler.get_scale())

    def grad_norm(self) -> float | None:
        grads = [p.grad.detach().reshape(-1).double() for p in self.params if p.grad is not None]
        return finite(float(torch.linalg.vector_norm(torch.cat(grads)))) if grads else 0.0


def _count(table: dict[str, int], key: str) -> None:
    table[key] = table.get(key, 0) + 1


class RecordingLoss:
    def __init__(self, loss_fn: torch.nn.Module, recorder: Recorder, device_type: str) -> None:
        self._loss_fn = loss_fn
        self._rec = recorder
        self._device_type = device_type

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loss_fn, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        loss = self._loss_fn(*args, **kwargs)
        rec = self._rec
        _count(rec.loss_dtypes, str(loss.dtype).removeprefix("torch."))
        on = torch.is_autocast_enabled(self._device_type)
        rec.loss_autocast["on" if on else "off"] += 1
        rec.event("L")
        return loss


def _share_scale(scaler: torch.amp.GradScaler, shared: torch.Tensor) -> Callable[[], None]:
    """Keep the scaler's scale in ``shared`` (a float32 scalar in the supervisor's memory): on
    the CPU the scaler's own tensor is swapped for it once the scaler has made one (its first
    ``scale()``; before that it has none, and says its initial scale, which ``shared`` holds),
    so every later update writes there; on a GPU (the inline run) copied before each reading."""

    def adopt(_result: object) -> None:
        current = scaler._scale
        if current is None or current.data_ptr() == shared.data_ptr():
            return
        with torch.no_grad():
            shared.copy_(current.detach().to(shared.device))
        if current.device == shared.device:
            scaler._scale = shared

    wrap_method(scaler, "scale", after=adopt)

    def mirror() -> None:
        if scaler._scale is not None and scaler._scale.data_ptr() != shared.data_ptr():
            with torch.no_grad():
                shared.copy_(scaler._scale.detach().to(shared.device))

    return mirror


def _instrument(
    model: torch.nn.Sequential,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    batches: list[scenarios.Batch],
    rec: Recorder,
    api: "Api",
    scale: torch.Tensor,
) -> Callable[[], None]:
    ptrs = {x.data_ptr(): i for i, (x, _) in enumerate(batches)}
    mirror = _share_scale(scaler, scale)

    def on_forward(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        x = args[0] if args else None
        index = ptrs.get(x.data_ptr(), -1) if isinstance(x, torch.Tensor) else -1
        rec.batch = index
        rec.event("F", index)
        mirror()
        api.sync("forward", index, snapshot=True)  # the supervisor reads the parameters and scale
        rec.forward = -1
        if len(rec.snapshots) < MAX_SNAPSHOTS:
            rec.forward = len(rec.snapshots)
            rec.snapshots.append(
                {
                    "batch": index,
                    "params": flat(rec.params),
                    "scale": rec.scale(),
                    "grad": torch.is_grad_enabled(),
                    "trained": False,
                    "linear": {},  # the dtypes its linear layers produced
                }
            )

    def after_forward(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        # a backward through this forward's output marks it as the one its batch trained on
        shot, index = rec.forward, rec.batch
        if not (isinstance(output, torch.Tensor) and output.requires_grad):
            return

        def reached(_grad: torch.Tensor) -> None:
            rec.trained = index
            if shot >= 0:
                rec.snapshots[shot]["trained"] = True

        output.register_hook(reached)

    def on_linear(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if isinstance(output, torch.Tensor):
            dtype = str(output.dtype).removeprefix("torch.")
            _count(rec.linear_dtypes, dtype)
            if rec.forward >= 0:
                _count(rec.snapshots[rec.forward]["linear"], dtype)

    # on the first layer, which takes the batch itself: ``model.forward(x)``, called directly,
    # runs no hook of the model's own, and a right loop calling it was refused ("never ran the
    # model on batch 1")
    model[0].register_forward_pre_hook(on_forward)
    model[0].register_forward_hook(after_forward)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(on_linear)
    rec.params[0].register_post_accumulate_grad_hook(lambda p: rec.event("B"))

    def batch() -> int:
        """The batch a clip or a step belongs to: the one whose backward ran last (a forward
        that only looks, between the backward and the step, does not move it)."""
        return rec.trained if rec.trained >= 0 else rec.batch

    def step() -> None:
        rec.event("S")
        if len(rec.step_norms) < MAX_SNAPSHOTS:
            rec.step_norms.append({"batch": batch(), "norm": rec.grad_norm()})

    wrap_step(optimizer, step)
    wrap_method(optimizer, "zero_grad", lambda *a, **k: rec.event("Z"))
    wrap_method(model, "zero_grad", lambda *a, **k: rec.event("Z"))
    # each call a sync the supervisor counts: the order check rests on its counts, not the events
    watch_scaler(scaler, rec, sync=lambda code: api.sync(code))

    def on_clip(parameters: Any, max_norm: Any, clip: Callable[[], Any]) -> Any:  # the norm the clip saw
        norm = clip()
        rec.event("C")
        if len(rec.clips) < MAX_SNAPSHOTS:
            rec.clips.append(
                {
                    "norm": finite(float(norm)),
                    "unscaled": rec.unscaled,
                    "scale": rec.scale(),
                    "batch": batch(),
                }
            )
        return norm

    patch_clip(on_clip)
    return mirror


def prepare(params: dict[str, Any]) -> "sharing.Layout":
    """The supervisor's part, device-free: the layout of what the child's set-up hands over,
    the model's parameters (built on the CPU without its batches) and the scale last."""
    model, _, _ = scenarios.amp_batches({**params, "n_batches": 0})
    return sharing.layout([*model.parameters(), torch.zeros((), dtype=torch.float32)])


def run(job: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    """The supervisor prepares (``prepare``: the layout it will read); the child builds the
    scenario, hands its parameters and the scale over (``set_up``, before the learner's file is
    loaded) and runs the rest (``learner``)."""
    params = job["params"]
    device = job.get("device", "cpu")
    device_type = torch.device(device).type
    layout = prepare(params)

    def set_up() -> tuple[Any, ...]:
        model, batches, loss_fn = scenarios.amp_batches(params, device)
        optimizer = torch.optim.SGD(model.parameters(), lr=float(params["lr"]))
        scaler = torch.amp.GradScaler(
            device_type,
            init_scale=float(params["init_scale"]),
            growth_interval=int(params["growth_interval"]),
        )
        rec = Recorder(model, scaler)
        scale = torch.full((), float(params["init_scale"]), dtype=torch.float32)
        api.hand_off([*rec.params, scale])  # the scale last: read beside the parameters
        return model, batches, loss_fn, optimizer, scaler, rec, scale

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        model, batches, loss_fn, optimizer, scaler, rec, scale = set_up()
        mirror = _instrument(model, optimizer, scaler, batches, rec, api, scale)
        available = {
            "model": model,
            "loader": scenarios.Loader(batches),
            "loss_fn": RecordingLoss(loss_fn, rec, device_type),
            "optimizer": optimizer,
            "scaler": scaler,
            "device_type": device_type,
            "amp_dtype": getattr(torch, params["amp_dtype"]),
            "max_norm": float(params["max_norm"]),
        }
        name_limits()
        fn = api.load_entry()
        api.check_signature(fn, SIGNATURE)
        error = api.call(fn, [available[name] for name in SIGNATURE])
        mirror()  # the last update's scale, where the scaler's is not the shared one (a GPU)
        data = {
            "snapshots": rec.snapshots,
            "final_params": flat(rec.params),
            "final_scale": rec.scale(),
            "events": rec.events,
            "linear_dtypes": rec.linear_dtypes,
            "loss_dtypes": rec.loss_dtypes,
            "loss_autocast": rec.loss_autocast,
            "clips": rec.clips,
            "step_norms": rec.step_norms,
        }
        return data, error

    return api.supervise(learner, layout=layout, device=device)
