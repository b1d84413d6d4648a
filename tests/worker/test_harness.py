"""The harness runs inside the sandbox: standard library and torch only."""

import ast
import sys
from pathlib import Path

import pytest

from worker.checks.accumulation import reference
from worker.harness import scenarios

HARNESS = Path(__file__).resolve().parents[2] / "worker" / "harness"


def test_harness_imports_only_stdlib_torch_and_itself():
    own = {p.stem for p in HARNESS.glob("*.py")}
    for path in HARNESS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, path  # run as plain scripts: no relative imports
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "torch" or top in own, (path, name)


def test_leaf_modules_import_no_siblings():
    # the checks import these as worker.harness.<name>; sibling imports would only work
    # inside the sandbox, where the harness dir is on sys.path
    own = {p.stem for p in HARNESS.glob("*.py")}
    for leaf in ("scenarios", "memory"):
        tree = ast.parse((HARNESS / f"{leaf}.py").read_text())
        imported = {
            a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }
        assert not imported & own, leaf


@pytest.mark.parametrize(
    "params",
    [
        {"scenario": "mlp", "n_micro": 12, "micro_batch": 5, "accum_steps": 4, "lr": 0.1},
        {"scenario": "tokens", "n_micro": 8, "micro_batch": 2, "accum_steps": 4, "lr": 0.5},
    ],
)
def test_one_micro_batch_holds_a_quarter_of_the_cycle(params):
    ref = reference(params)
    assert len(ref.trajectory) == 2 if params["scenario"] == "tokens" else 3
    assert ref.cycle_peak == pytest.approx(4 * ref.micro_peak, rel=0.05)


def test_scenarios_are_seeded():
    a = scenarios.build({"scenario": "tokens", "n_micro": 2, "micro_batch": 2, "seed": 3})
    b = scenarios.build({"scenario": "tokens", "n_micro": 2, "micro_batch": 2, "seed": 3})
    assert all(
        (x1 == x2).all() and (y1 == y2).all()
        for (x1, y1), (x2, y2) in zip(a.micro_batches, b.micro_batches, strict=True)
    )


def test_live_tensor_meter_sees_what_a_checkpointed_backward_recomputes():
    from torch.utils.checkpoint import checkpoint

    from worker.harness import memory

    params = {"seed": 0, "width": 16, "blocks": 6, "depth": 3, "batch_size": 64, "n_batches": 1}
    model, [(x, y)], loss_fn = scenarios.block_net(params)
    weights = list(model.parameters())

    def peak(forward):
        model.zero_grad(set_to_none=True)
        with memory.LiveTensorMeter(weights) as meter:
            loss_fn(forward(x), y).backward()
        return meter.peak

    def per_block(h):
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return model.head(h)

    naive = peak(model)
    assert peak(per_block) <= 0.6 * naive  # 0.55
    # one checkpoint around everything: backward recomputes it all at once
    assert peak(lambda h: checkpoint(model, h, use_reentrant=False)) == naive


def test_live_tensor_meter_counts_what_is_saved_while_it_is_switched_off_and_says_so():
    """Taking the meter's dispatch mode off the stack around the naive step (torch's private
    ``_disable_current_modes``) hid every activation: peak 0 bytes, and fit-the-budget passed."""
    from torch.utils._python_dispatch import _disable_current_modes

    from worker.harness import memory

    params = {"seed": 0, "width": 16, "blocks": 6, "depth": 3, "batch_size": 64, "n_batches": 1}
    model, [(x, y)], loss_fn = scenarios.block_net(params)
    weights = list(model.parameters())
    told = []

    def report(packed, freed, note=0):
        told.append(note == memory.BLIND)

    with memory.LiveTensorMeter(weights, report, inputs=(x, y)) as meter:
        loss_fn(model(x), y).backward()
    naive = meter.peak
    assert not any(told)
    model.zero_grad(set_to_none=True)
    with memory.LiveTensorMeter(weights, report, inputs=(x, y)) as meter:
        with _disable_current_modes():
            loss = loss_fn(model(x), y)  # activations saved where no op was seen
        assert meter.peak >= 0.8 * naive  # counted anyway, through autograd's saved tensors
        loss.backward()
    assert any(told)  # and the supervisor is told at once
