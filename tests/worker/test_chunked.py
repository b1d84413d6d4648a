"""The "chunked" kind (lesson 6, chunked-loss): what the check concludes from what the supervisor
saw, on made-up traces of a tiny scenario (the exercise's solution and mistakes are graded for
real by `treino lessons check`, other styles and attacks in golden/chunked-loss/ and
tests/sandbox/test_red_team_three.py). One run (issue 41): the parameters the supervisor read
after every batch, and the kernel's count of the process's memory over that same run."""

import pytest
import torch

from worker.checks import Interfered, tensors
from worker.checks import chunked as check
from worker.harness import chunked as harness

PARAMS = {
    "seed": 0,
    "vocab": 12,
    "dim": 4,
    "batch_size": 3,
    "seq_len": 5,
    "most_padding": 2,
    "n_batches": 2,
    "chunk_size": 4,
    "lr": 0.5,
}
MIB = 1 << 20
LIMIT = check.limit(PARAMS)
SEED = 12345.0  # the seed of the places the supervisor read (every place: the tiny model's tensors are small)
CHUNKED = [[0, 4, False]] * 4 + [[0, 4, True]] * 4  # lm_head's calls: forward, then again in backward


def _shot(flat):
    return [SEED, *flat.tolist()]


def _data(after, *, rise=LIMIT // 2, since=None, calls=None, fetched_first=False):
    """A trace whose supervisor read ``after`` (the parameters after each optimizer step) as
    ``hookstep.Sampled`` reads them, each batch fetched before its step (all of them before the
    first step where ``fetched_first``), and the memory rising by ``rise`` over the run (``since``
    from the file's load: ``rise`` where None)."""
    ref = check.trajectory(PARAMS)
    snaps = [_shot(ref.params[0]), *[_shot(a) for a in after], _shot(after[-1] if after else ref.params[0])]
    batches = [["batch", i, 0.0, -1] for i in range(PARAMS["n_batches"])]
    steps = [["step", i, 0.0, i + 1] for i in range(len(after))]
    if fetched_first:
        events = [*batches, *steps]
    else:
        events = [e for pair in zip(batches, steps, strict=False) for e in pair] + batches[len(steps) :]
    events = [["memory-start", -1, 0.5, 0], *events, ["memory-end", -1, 11.0, len(after) + 1]]
    base = 300 * MIB
    since = rise if since is None else since
    observed = {
        "mode": "fork",
        "counts": {"batch": len(batches), "step": len(after), "memory-start": 1, "memory-end": 1},
        "events": events,
        "snapshots": snaps,
        "final_params": snaps[-1],
        "memory": [
            ["watch-memory", -1, base, base],
            ["memory-start", -1, base + since - rise, base + since - rise],
            ["memory-end", -1, base, base + since],
        ],
        "memory_lowered": 0,
        "interfered": None,
    }
    return {"calls": CHUNKED if calls is None else calls, "observed": observed}


def _reference():
    return check.trajectory(PARAMS).params[1:]


def test_a_loop_that_follows_the_whole_loss_within_the_memory_budget_passes():
    result = check.evaluate(PARAMS, _data(_reference()), "cpu")
    assert result.passed, result.checks
    assert result.diagnosis is None
    [drawn] = result.metrics["charts"]
    values = {bar["label"]: bar["value"] for bar in drawn["bars"]}
    assert values["yours"] == LIMIT // 2 and values["whole"] == harness.logits_bytes(PARAMS)


def test_a_short_last_batch_is_built_where_the_exercise_asks_for_one():
    _model, batches = harness.the_run({**PARAMS, "last_batch_size": 1})
    assert [tuple(x.shape) for x, _y in batches] == [(3, 5), (1, 5)]


def test_the_chunked_reference_is_the_whole_loss():
    """The worker's reference sums chunks under checkpoint: the same step as the whole logits'."""
    model, batches = harness.the_run(PARAMS)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=PARAMS["lr"])
    for x, y in batches:
        logits = model(x).flatten(0, 1)
        torch.nn.functional.cross_entropy(logits, y.flatten(), ignore_index=-100).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert torch.allclose(tensors.flat(weights), _reference()[-1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(check.MATHS_MISTAKES))
def test_each_wrong_loss_is_named_by_the_trajectory_it_gives(name):
    after = check.trajectory(PARAMS, name).params[1:]
    result = check.evaluate(PARAMS, _data(after), "cpu")
    assert not result.passed
    assert result.diagnosis is not None and result.diagnosis.id == name
    assert result.checks[0].message == "check.chunked-trajectory.failed"
    assert result.checks[1].message == "check.logits_kernel.untrained", "no memory figure for a wrong loop"


def test_a_wrong_loss_in_the_learner_s_own_chunk_size_is_named_from_the_reported_rows():
    after = check.trajectory(PARAMS, "chunks-not-weighted", 3).params[1:]
    calls = [[0, 3, False]] * 5
    assert check.evaluate(PARAMS, _data(after, calls=calls), "cpu").diagnosis.id == "chunks-not-weighted"
    # the rows reported only choose what to recompute: a report of other rows names nothing
    assert check.evaluate(PARAMS, _data(after, calls=[[0, 2, False]]), "cpu").diagnosis is None


def test_the_memory_mistakes_train_right_and_fail_on_the_kernel_s_figure():
    whole = [[0, 15, False]] * 2
    result = check.evaluate(PARAMS, _data(_reference(), rise=3 * LIMIT, calls=whole), "cpu")
    assert [c.passed for c in result.checks] == [True, False, False]
    assert result.checks[1].message == "check.logits_kernel.failed"
    assert result.checks[2].message == "check.chunked-size.failed", "and by its own report, 15 rows at once"
    assert result.diagnosis.id == "whole-logits-built"
    kept = [[0, 4, False]] * 4
    result = check.evaluate(PARAMS, _data(_reference(), rise=2 * LIMIT, calls=kept), "cpu")
    assert result.diagnosis.id == "graph-kept-across-chunks"
    assert result.diagnosis.values == {"chunks": 4, "rows": 4}


def test_chunks_larger_than_asked_fail_on_the_kernel_s_figure_whatever_the_report_says():
    """A call that no hook sees (``F.linear`` on lm_head's weight) leaves the report empty: the
    kernel's line fails chunks half again as large; a report of them fails them too."""
    result = check.evaluate(PARAMS, _data(_reference(), rise=LIMIT + 1, calls=[]), "cpu")
    assert [c.passed for c in result.checks] == [True, False]
    larger = [[0, 6, False]] * 3 + [[0, 6, True]] * 3
    result = check.evaluate(PARAMS, _data(_reference(), calls=larger), "cpu")
    assert [c.passed for c in result.checks] == [True, True, False] and result.diagnosis is None
    assert result.checks[-1].values == {"rows": 6, "chunk_size": 4, "tokens": 15}


def test_a_report_that_says_checkpoint_ran_does_not_make_a_high_peak_pass():
    result = check.evaluate(PARAMS, _data(_reference(), rise=2 * LIMIT), "cpu")  # the honest-looking calls
    assert not result.passed and result.diagnosis is None


def test_a_report_of_no_calls_at_all_passes_only_on_what_was_observed():
    assert check.evaluate(PARAMS, _data(_reference(), calls=[]), "cpu").passed
    assert not check.evaluate(PARAMS, _data(_reference(), rise=LIMIT + 1, calls=[]), "cpu").passed


def test_memory_held_before_the_run_and_freed_in_it_is_counted_from_the_file_s_load():
    """A decoy held from the file's load and freed as the loop began: the whole logits then fit
    under the high-water mark it raised, a rise of 0 B from the run's start."""
    data = _data(_reference(), rise=0, since=300 * MIB, calls=[[0, 15, False]])
    result = check.evaluate(PARAMS, data, "cpu")
    assert not result.passed
    assert result.checks[1].message == "check.logits_kernel.held"
    assert result.checks[1].values["since"] == 300 * MIB
    assert result.diagnosis.id == "whole-logits-built"  # the calls reported name the mistake
    held = _data(_reference(), rise=LIMIT // 2, since=LIMIT + check.HELD)
    assert check.evaluate(PARAMS, held, "cpu").passed, "what a right loop holds from the load is allowed"


def test_a_loop_that_trains_nothing_fails_whatever_its_peak():
    still = [check.trajectory(PARAMS).params[0]] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(still, rise=0), "cpu")
    assert not result.passed
    assert result.checks[0].message == "check.chunked-trajectory.failed"
    assert result.checks[1].message == "check.logits_kernel.untrained"


def test_a_short_run_is_not_a_pass():
    result = check.evaluate(PARAMS, _data(_reference()[:1]), "cpu")
    assert not result.passed
    assert result.checks[0].message == "check.chunked-trajectory.batches"
    assert result.checks[0].values == {"batches": 1, "expected": 2}


def test_a_loop_that_takes_its_batches_first_is_read_after_each_step():
    """Red team 5: read at the next batch's fetch, ``for x, y in list(loader)`` was read before
    it stepped ("misses by 1.00 of the step"); read at the step, it passes as any right loop."""
    result = check.evaluate(PARAMS, _data(_reference(), fetched_first=True), "cpu")
    assert result.passed, result.checks


def test_a_step_more_than_the_batches_is_not_a_pass():
    """An extra step (a zero-gradient one moves nothing) is refused on the supervisor's count."""
    ref = _reference()
    result = check.evaluate(PARAMS, _data([*ref, ref[-1]]), "cpu")
    assert not result.passed
    assert result.checks[0].values == {"batches": 3, "expected": 2}


@pytest.mark.parametrize("shot", [[], [0.5, 1.0], "x", [SEED, 1.0, 2.0]])
def test_parameters_read_in_another_shape_are_interference(shot):
    data = _data(_reference())
    data["observed"]["snapshots"][2] = shot  # the parameters read after the second step
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")


@pytest.mark.parametrize("calls", [None, [[0, 4]], [[0, 4.0, False]], [[0, 4, 1]], "calls"])
def test_reported_calls_of_another_shape_are_interference(calls):
    data = _data(_reference())
    data["calls"] = calls
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")


def test_a_lowered_high_water_mark_is_interference():
    data = _data(_reference())
    data["observed"]["memory_lowered"] = 64 * MIB
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")
