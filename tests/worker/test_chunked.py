"""The "chunked" kind (lesson 6, chunked-loss): what the check concludes from what the supervisor
saw, on made-up traces of a tiny scenario (the exercise's solution and mistakes are graded for
real by `treino lessons check`, other styles and attacks in golden/chunked-loss/)."""

import pytest
import torch

from worker.checks import Interfered, tensors
from worker.checks import chunked as check
from worker.harness import sequences

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
    "memory_vocab": 16,
    "memory_dim": 4,
    "memory_rows": 2,
    "memory_seq_len": 8,
    "memory_chunk": 4,
}
MIB = 1 << 20
LIMIT = int(check.KERNEL_FACTOR * sequences.memory_logits_bytes(PARAMS))
CHUNKED = [[0, 4, False]] * 4 + [[0, 4, True]] * 4  # lm_head's calls: forward, then again in backward


def _start():
    model, _ = sequences.chunked(PARAMS)
    return tensors.flat(model.parameters()).tolist()


def _wide_start():
    model, _ = sequences.chunked_memory(PARAMS)
    return tensors.flat(sequences.watched(model)).tolist()


def _data(after, *, rise=LIMIT // 2, mix=None, calls=None, memory_calls=None):
    """A trace whose supervisor read ``after`` (the parameters after each batch), then ran the
    memory run, the mixing layer ending at ``mix`` (where the whole loss's step puts it unless
    given) and the memory rising by ``rise``."""
    mix = check.memory(PARAMS).mix.tolist() if mix is None else mix
    before = [_start(), *[a.tolist() for a in after[:-1]]]
    final = after[-1].tolist()
    snaps = [b + _wide_start() for b in before] + [final + _wide_start(), final + mix]
    events = [["batch", i, float(i), i] for i in range(len(before))]
    events += [["memory-start", -1, 10.0, len(before)], ["memory-end", -1, 11.0, len(before) + 1]]
    base = 300 * MIB
    observed = {
        "mode": "fork",
        "counts": {"batch": len(before), "memory-start": 1, "memory-end": 1},
        "events": events,
        "snapshots": snaps,
        "final_params": final + mix,
        "memory": [
            ["watch-memory", -1, base, base],
            ["memory-start", -1, base, base],
            ["memory-end", -1, base, base + rise],
        ],
        "memory_lowered": 0,
        "interfered": None,
    }
    calls = CHUNKED if calls is None else calls
    calls = calls + ([[1, 4, False]] * 4 + [[1, 4, True]] * 4 if memory_calls is None else memory_calls)
    return {"calls": calls, "final_params": final, "observed": observed}


def _reference():
    return check.trajectory(PARAMS)


def test_a_loop_that_follows_the_whole_loss_within_the_memory_budget_passes():
    result = check.evaluate(PARAMS, _data(_reference()), "cpu")
    assert result.passed, result.checks
    assert result.diagnosis is None
    [drawn] = result.metrics["charts"]
    values = {bar["label"]: bar["value"] for bar in drawn["bars"]}
    assert values["yours"] == LIMIT // 2 and values["whole"] == sequences.memory_logits_bytes(PARAMS)


def test_the_chunked_reference_is_the_whole_loss():
    """The reference's trusted memory run sums chunks under checkpoint: the same step as the whole loss."""
    model, [(x, y)] = sequences.chunked_memory(PARAMS)
    optimizer = torch.optim.SGD(model.parameters(), lr=PARAMS["lr"])
    check.whole_loss(model, x, y, 0).backward()
    optimizer.step()
    whole = tensors.flat(sequences.watched(model))
    assert torch.allclose(whole, check.memory(PARAMS).mix, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(check.MATHS_MISTAKES))
def test_each_wrong_loss_is_named_by_the_trajectory_it_gives(name):
    after = check.trajectory(PARAMS, name)
    result = check.evaluate(PARAMS, _data(after), "cpu")
    assert not result.passed
    assert result.diagnosis is not None and result.diagnosis.id == name
    assert result.checks[0].message == "check.chunked-trajectory.failed"


def test_a_wrong_loss_in_the_learner_s_own_chunk_size_is_named_from_the_reported_rows():
    after = check.trajectory(PARAMS, "chunks-not-weighted", 3)
    calls = [[0, 3, False]] * 5
    assert check.evaluate(PARAMS, _data(after, calls=calls), "cpu").diagnosis.id == "chunks-not-weighted"
    # the rows reported only choose what to recompute: a report of other rows names nothing
    assert check.evaluate(PARAMS, _data(after, calls=[[0, 2, False]]), "cpu").diagnosis is None


def test_the_memory_mistakes_train_right_and_fail_on_the_kernel_s_figure():
    whole = [[1, 16, False]]
    result = check.evaluate(PARAMS, _data(_reference(), rise=3 * LIMIT, memory_calls=whole), "cpu")
    assert [c.passed for c in result.checks] == [True, False, False]
    assert result.checks[1].message == "check.logits_kernel.failed"
    assert result.checks[2].message == "check.chunked-size.failed", "and by its own report, 16 rows at once"
    assert result.diagnosis.id == "whole-logits-built"
    kept = [[1, 4, False]] * 4
    result = check.evaluate(PARAMS, _data(_reference(), rise=2 * LIMIT, memory_calls=kept), "cpu")
    assert result.diagnosis.id == "graph-kept-across-chunks"
    assert result.diagnosis.values == {"chunks": 4, "rows": 4}


def test_a_chunk_larger_than_asked_fails_on_the_program_s_own_report_where_memory_cannot_tell():
    """The maths run's logits are a few hundred bytes, and a chunk half again as large as asked
    stays under the memory run's line: the program's own report of lm_head's rows fails it."""
    whole = [[0, 15, False], [0, 15, True]]  # the maths run's 15 positions at once
    result = check.evaluate(PARAMS, _data(_reference(), calls=whole), "cpu")
    assert not result.passed and result.checks[-1].message == "check.chunked-size.failed"
    assert result.checks[-1].values == {"rows": 15, "chunk_size": 4, "tokens": 15}
    assert result.diagnosis.id == "whole-logits-built"
    larger = [[1, 6, False]] * 3 + [[1, 6, True]] * 3  # 1.5x the memory run's chunk, within its line
    result = check.evaluate(PARAMS, _data(_reference(), memory_calls=larger), "cpu")
    assert [c.passed for c in result.checks] == [True, True, False] and result.diagnosis is None


def test_a_report_that_says_checkpoint_ran_does_not_make_a_high_peak_pass():
    result = check.evaluate(PARAMS, _data(_reference(), rise=2 * LIMIT), "cpu")  # the honest-looking calls
    assert not result.passed and result.diagnosis is None


def test_a_report_of_no_calls_at_all_passes_only_on_what_was_observed():
    assert check.evaluate(PARAMS, _data(_reference(), calls=[], memory_calls=[]), "cpu").passed
    assert not check.evaluate(
        PARAMS, _data(_reference(), rise=LIMIT + 1, calls=[], memory_calls=[]), "cpu"
    ).passed


def test_memory_held_before_the_run_and_freed_in_it_is_counted_from_the_file_s_load():
    """A decoy of 300 MiB held into the memory run and freed as it began: the whole logits then
    fit under the high-water mark it raised, a rise of 0 B from the run's start."""
    data = _data(_reference(), rise=0, memory_calls=[[1, 16, False]])
    base = 300 * MIB
    data["observed"]["memory"] = [
        ["watch-memory", -1, base, base],
        ["memory-start", -1, base + 300 * MIB, base + 300 * MIB],
        ["memory-end", -1, base, base + 300 * MIB],
    ]
    result = check.evaluate(PARAMS, data, "cpu")
    assert not result.passed
    assert result.checks[1].message == "check.logits_kernel.held"
    assert result.checks[1].values["since"] == 300 * MIB
    assert result.diagnosis.id == "whole-logits-built"  # the calls reported name the mistake


def test_a_memory_run_that_trained_nothing_fails_whatever_its_peak():
    result = check.evaluate(PARAMS, _data(_reference(), rise=0, mix=_wide_start()), "cpu")
    assert not result.passed
    assert result.checks[1].message == "check.logits_kernel.untrained"


def test_a_loop_that_trains_nothing_fails_the_trajectory():
    still = [torch.tensor(_start(), dtype=torch.float64)] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(still), "cpu")
    assert not result.passed
    assert result.checks[0].message == "check.chunked-trajectory.failed"


def test_a_short_run_is_not_a_pass():
    result = check.evaluate(PARAMS, _data(_reference()[:1]), "cpu")
    assert not result.passed
    assert result.checks[0].message == "check.chunked-trajectory.batches"
    assert result.checks[0].values == {"batches": 1, "expected": 2}


def test_reported_parameters_that_differ_from_the_observed_ones_are_interference():
    data = _data(_reference())
    data["final_params"] = [v + 1e-3 for v in data["final_params"]]
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
