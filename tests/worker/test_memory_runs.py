"""What fit-the-budget's release run, train-an-adapter's no-gradient line and accumulation's one
run conclude from the kernel's figures (issue 41), on made-up traces of tiny scenarios: a right
run passes; what stayed after the step, or what the run rose, over the line fails; memory held
before the run and freed in it (a ballast) fails on the figure from the learner's file's load;
the job's cgroup counts where the process does not. The exercises' own runs are graded for real
in golden/."""

import pytest

from worker.checks import accumulation, adapter, checkpointing, tensors
from worker.harness import scenarios

MIB = 1 << 20
BUDGET = {
    "seed": 0,
    "width": 4,
    "blocks": 2,
    "depth": 1,
    "batch_size": 8,
    "n_batches": 1,
    "lr": 0.1,
    "budget": 0.65,
    "memory_batch": 16,
    "memory_release_width": 8,
}


def _budget_trace(stayed, *, held=5 * MIB, charged=None, trained=True):
    """A trace whose release run ended with its biases where the naive step puts them (or where
    they began) and the process holding ``stayed`` more than at the run's start, ``held`` more
    than at the watch; ``charged``: the cgroup's own figures, (at start, at end) over the watch."""
    size = checkpointing.reference(BUDGET).size
    mem, release = checkpointing.memory_reference(BUDGET), checkpointing.release_reference(BUDGET)
    model, _, _ = scenarios.block_net(scenarios.release_params(BUDGET))
    start = tensors.flat([m.bias for m in model.modules() if hasattr(m, "bias") and m.bias is not None])
    biases = release.biases if trained else start
    values = [0.0] * size + mem.params.tolist() + biases.tolist()
    base = 200 * MIB
    cg = charged or (held, held + stayed)
    memory = [
        ["watch-memory", -1, base, base, 10 * MIB, 10 * MIB],
        ["memory-release-start", -1, base + held, base + 60 * MIB, 10 * MIB + cg[0], 70 * MIB],
        ["memory-release-end", -1, base + held + stayed, base + 60 * MIB, 10 * MIB + cg[1], 70 * MIB],
    ]
    return {
        "observed": {
            "mode": "fork",
            "counts": {"memory-release-end": 1},
            "events": [["memory-release-end", -1, 1.0, 0]],
            "snapshots": [values],
            "final_params": values,
            "memory": memory,
            "memory_lowered": 0,
            "interfered": None,
        }
    }, size


def _release(data, size):
    return checkpointing.release_check(BUDGET, data, "cpu", size)


def test_a_step_that_releases_its_gradients_passes():
    check = _release(*_budget_trace(100))  # bytes: the tiny run's gradients are 1,368
    assert check.passed, check
    assert check.message == "check.released_kernel.passed"


def test_gradients_kept_after_the_step_fail():
    grads = checkpointing.release_reference(BUDGET).grad_bytes
    check = _release(*_budget_trace(grads + MIB))
    assert not check.passed and check.message == "check.released_kernel.failed", check


def test_a_ballast_freed_in_the_run_fails_on_the_figure_from_the_load():
    # 0 B more than at the run's start (the ballast's room refilled), 40 MiB more than at the load
    check = _release(*_budget_trace(0, held=40 * MIB))
    assert not check.passed and check.message == "check.released_kernel.held", check
    assert check.values["since"] == 40 * MIB


def test_what_the_cgroup_counts_beyond_the_process_stays_too():
    # kept in a file of the job's tmpfs: the process's pages do not rise, the cgroup's do
    check = _release(*_budget_trace(0, charged=(5 * MIB, 45 * MIB)))
    assert not check.passed and check.values["stayed"] == 40 * MIB, check


def test_a_release_run_that_did_not_step_has_no_figure():
    check = _release(*_budget_trace(0, trained=False))
    assert not check.passed and check.message == "check.released_kernel.untrained", check


ADAPTER = {"inputs": 1024, "hidden": 16, "classes": 1024, "n_micro": 2}  # the one run (issue 41)
GRADIENT = 1024 * 16 * 8  # each weight's gradient


def _adapter_seen(rise, held=MIB, fetched=2):
    base = 300 * MIB
    return {
        "mode": "fork",
        "counts": {"batch": fetched},  # the run's batches, as the supervisor counted them
        "memory": [
            ["watch-memory", -1, base, base, -1, -1],
            ["memory-start", -1, base + held, base + held, -1, -1],
            ["memory-end", -1, base + held, base + held + rise, -1, -1],
        ],
        "memory_lowered": 0,
    }


@pytest.mark.parametrize(
    ("rise", "held", "graded", "message"),
    [
        (0, MIB, 0, "check.frozen-no-grad.passed"),
        (GRADIENT, MIB, 0, "check.frozen-no-grad.kernel"),  # a report with no gradient, the kernel's figure
        (0, 60 * MIB, 0, "check.frozen-no-grad.held"),  # the gradient under a ballast's mark
        (GRADIENT, MIB, 2, "check.frozen-no-grad.failed"),  # the child's own report names it
    ],
)
def test_the_adapters_no_gradient_line(rise, held, graded, message):
    seen = _adapter_seen(rise, held)
    if message == "check.frozen-no-grad.held":  # freed as the run began: the mark stays where it was
        seen["memory"][2][3] = seen["memory"][1][3] = 300 * MIB + held
    check = adapter._no_grad_check(ADAPTER, {}, seen, graded)
    assert check.message == message, check
    assert check.passed == (message == "check.frozen-no-grad.passed")


def test_a_memory_run_that_fetched_no_batch_has_no_figure_to_pass_on():
    """A loop that returned at once rose by 0 B and passed (red team, issue 41)."""
    check = adapter._no_grad_check(ADAPTER, {}, _adapter_seen(0, fetched=0), 0)
    assert not check.passed and check.message == "check.frozen-no-grad.untrained"
    assert check.values["fetched"] == 0 and check.values["batches"] == 2


def test_without_a_watched_child_the_line_is_the_programs_word():
    check = adapter._no_grad_check(ADAPTER, {}, {"mode": "inline"}, 0)
    assert check.passed and check.message == "check.frozen-no-grad.reported"


ACCUMULATE = {"scenario": "mlp", "n_micro": 8, "micro_batch": 5, "accum_steps": 4, "lr": 0.1, "seed": 0}


def _accumulation_trace(rise, held=MIB, *, mode="fork"):
    """One run's trace, as the supervisor reads it around the learner's call: ``held`` more
    than at the watch as the call began, ``rise`` more at its peak by the call's end."""
    base = 250 * MIB
    return {
        "observed": {
            "mode": mode,
            "memory": [
                ["watch-memory", -1, base, base, -1, -1],
                ["memory-start", -1, base + held, base + held, -1, -1],
                ["memory-end", -1, base + held, base + held + rise, -1, -1],
            ],
            "memory_lowered": 0,
        }
    }


@pytest.mark.parametrize(
    ("rise", "held", "message"),
    [
        (1.3, 1, "check.memory_kernel.within"),  # one micro-batch at a time, its backward's work
        (2.5, 1, "check.memory_kernel.over"),  # the whole cycle alive for one backward
        (1.0, 30, "check.memory_kernel.held"),  # the same cycle, under a ballast freed as it began
    ],
)
def test_accumulations_one_run_is_counted_from_the_call_and_from_the_load(rise, held, message):
    """``rise`` in what one micro-batch saves for backward; ``held`` in MiB."""
    params = {**ACCUMULATE, "kernel_memory": True}
    ref = accumulation.reference(ACCUMULATE)
    data = _accumulation_trace(int(rise * ref.micro_peak), held * MIB)
    check = accumulation.kernel_check(params, data, ref)
    assert check is not None and check.message == message, check
    assert check.passed == (message == "check.memory_kernel.within")
    assert check.values["micro"] == 5 and check.values["limit"] == int(
        accumulation.KERNEL_FACTOR * ref.micro_peak
    )


def test_accumulation_without_the_kernels_count_has_no_such_line():
    ref = accumulation.reference(ACCUMULATE)
    assert accumulation.kernel_check(ACCUMULATE, _accumulation_trace(0), ref) is None  # not asked
    inline = _accumulation_trace(0, mode="inline")  # on CUDA: no child watched
    assert accumulation.kernel_check({**ACCUMULATE, "kernel_memory": True}, inline, ref) is None
