"""The "packing" kind (lesson 6, pack-the-batch): the trusted packing against each document alone,
and what the check concludes from what the supervisor saw, on made-up traces of a tiny scenario
(the exercise's solution and mistakes are graded for real by `treino lessons check`, other styles
and attacks in golden/pack-the-batch/)."""

import pytest
import torch

from worker.checks import Interfered, tensors
from worker.checks import packing as check
from worker.harness import sequences

PARAMS = {
    "seed": 0,
    "vocab": 10,
    "dim": 4,
    "row_len": 8,
    "min_doc": 2,
    "max_doc": 5,
    "docs_per_batch": 4,
    "n_batches": 2,
    "lr": 0.5,
}


def test_packed_rows_with_document_masks_and_restarting_positions_are_each_document_alone():
    model, batches = sequences.packing(PARAMS)
    documents = batches[0]
    losses, grads = [], []
    for loss_of in (check.alone_loss, check.packed_loss):
        model.zero_grad()
        loss = loss_of(model, documents, PARAMS["row_len"])
        loss.backward()
        losses.append(loss.detach())
        grads.append(tensors.flat(p.grad for p in model.parameters()))
    assert torch.allclose(losses[0], losses[1], rtol=1e-12)
    assert torch.allclose(grads[0], grads[1], rtol=0, atol=1e-12)
    for mistake in check.MISTAKES.values():  # every mistake changes the loss on these rows
        wrong = check.packed_loss(model, documents, PARAMS["row_len"], **mistake)
        assert not torch.allclose(wrong.detach(), losses[0], rtol=1e-6), mistake


def test_pack_puts_whole_documents_in_order_and_marks_the_boundaries():
    docs = [torch.tensor([1, 2, 3]), torch.tensor([4, 5]), torch.tensor([6, 7, 8, 9])]
    rows = check.pack(docs, 6)
    assert rows.tokens.tolist() == [[1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 0, 0]]
    assert rows.labels.tolist() == [[2, 3, -100, 5, -100, -100], [7, 8, 9, -100, -100, -100]]
    assert rows.boundary.tolist()[0] == [2, 3, 4, 5, -100, -100]
    assert rows.positions.tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0]]
    assert rows.docs.tolist() == [[0, 0, 0, 1, 1, -1], [0, 0, 0, 0, -1, -1]]


SEED = 12345.0  # the seed of the places the supervisor read (every place: the tiny model's tensors are small)
MIB = 1 << 20
# the kernel's count of the run (issue 41, red team 5): one run, the model's rows' logits counted
COUNTED = {**PARAMS, "kernel_memory": True}


def _start():
    return check.trajectory(PARAMS)[0]


def _after():
    return check.trajectory(PARAMS)[1:]


def _data(after, rows=None, forwards=None, *, fetched_first=False, rise=None, held=MIB):
    """A trace whose supervisor read ``after`` (the parameters after each optimizer step) as
    ``hookstep.Sampled`` reads them, each batch fetched before its step (all of them first where
    ``fetched_first``), and counted one call of the model per batch, on ``rows`` rows each (the
    packed count unless given). With ``rise``, the kernel's count of the run: the memory rose by
    ``rise`` at its peak, ``held`` more than at the watch as it began."""
    rows = list(check.packed_rows(PARAMS)) if rows is None else rows
    snaps = [[SEED, *a.tolist()] for a in after]
    batches = [["batch", i, float(i), -1] for i in range(PARAMS["n_batches"])]
    calls = [["forward", r * PARAMS["row_len"], float(i) + 0.5, -1] for i, r in enumerate(rows)]
    steps = [["step", i, float(i) + 0.7, i] for i in range(len(after))]
    if fetched_first:
        events = [*batches, *calls, *steps]
    else:
        n = max(len(batches), len(calls), len(steps))
        events = [e for i in range(n) for part in (batches, calls, steps) for e in part[i : i + 1]]
    count = len(rows) if forwards is None else forwards
    observed = {
        "mode": "fork",
        "counts": {"batch": len(batches), "forward": count, "step": len(after)},
        "events": events,
        "snapshots": snaps,
        "final_params": snaps[-1] if snaps else [],
        "interfered": None,
    }
    if rise is not None:
        base = 300 * MIB
        observed["snapshots"] = [*snaps, snaps[-1]]
        observed["events"] = [["memory-start", -1, 0.1, -1], *events, ["memory-end", -1, 9.0, len(snaps)]]
        observed["counts"] |= {"memory-start": 1, "memory-end": 1}
        observed["memory"] = [
            ["watch-memory", -1, base, base, -1, -1],
            ["memory-start", -1, base + held, base + held, -1, -1],
            ["memory-end", -1, base + held, base + held + rise, -1, -1],
        ]
        observed["memory_lowered"] = 0
    return {"observed": observed}


def test_a_loop_that_trains_each_document_as_if_alone_on_packed_rows_passes():
    result = check.evaluate(PARAMS, _data(_after()), "cpu")
    assert result.passed, result.checks
    assert result.diagnosis is None
    assert result.metrics["model_rows"] == list(check.packed_rows(PARAMS))


def test_a_loop_that_packs_every_batch_first_is_read_after_each_step():
    """Red team 5: read at the next batch's fetch, the solution packing every batch first (a
    list comprehension over the loader) was read before it stepped; read at the step, it passes."""
    result = check.evaluate(PARAMS, _data(_after(), fetched_first=True), "cpu")
    assert result.passed, result.checks


@pytest.mark.parametrize("name", sorted(check.MISTAKES))
def test_each_mistake_is_named_by_the_trajectory_it_gives(name):
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS, name)[1:]), "cpu")
    assert not result.passed
    assert result.checks[0].message == "check.packed-trajectory.failed"
    assert result.diagnosis is not None and result.diagnosis.id == name


def test_one_document_per_row_trains_right_and_fails_on_its_rows():
    rows = [PARAMS["docs_per_batch"]] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(_after(), rows=rows), "cpu")
    assert [c.passed for c in result.checks] == [True, False]
    assert result.diagnosis.id == "one-document-per-row"
    assert result.diagnosis.values["rows"] == PARAMS["docs_per_batch"]


def test_documents_in_padded_slots_of_one_long_row_fail_on_their_positions():
    """Not packed, though one row: each document in a slot of its own padded to row_len, the
    slots end to end (red team, issue 41: it passed when only rows were counted)."""
    slots = [PARAMS["docs_per_batch"] * PARAMS["row_len"]] * PARAMS["n_batches"]
    data = _data(_after())
    forwards = [e for e in data["observed"]["events"] if e[0] == "forward"]
    for event, positions in zip(forwards, slots, strict=True):
        event[1] = positions
    result = check.evaluate(PARAMS, data, "cpu")
    assert [c.passed for c in result.checks] == [True, False]
    assert result.checks[1].values["positions"] == slots[0]
    assert result.diagnosis.id == "one-document-per-row"


def test_a_call_for_show_on_less_than_a_row_fails_unnamed():
    """Red team 5: a loop that never packs, with one call of the embedding on a (1, 1) dummy per
    batch: the report fails it (not whole rows), and names no mistake it did not show."""
    data = _data(_after())
    for event in data["observed"]["events"]:
        if event[0] == "forward":
            event[1] = 1
    result = check.evaluate(PARAMS, data, "cpu")
    assert [c.passed for c in result.checks] == [True, False] and result.diagnosis is None


def test_a_call_per_document_fails_on_the_count_whatever_rows_it_said():
    n = PARAMS["docs_per_batch"] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(_after(), rows=[1] * n), "cpu")
    assert not result.passed
    assert result.checks[1].message == "check.packed-rows.calls"
    # a model never called (its submodules used by hand) is no pass either
    assert not check.evaluate(PARAMS, _data(_after(), rows=[]), "cpu").passed


def test_a_loop_that_trains_nothing_fails_unnamed():
    still = [_start()] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(still), "cpu")
    assert not result.passed and result.diagnosis is None


def test_a_short_run_or_an_extra_step_is_not_a_pass():
    result = check.evaluate(PARAMS, _data(_after()[:1]), "cpu")
    assert not result.passed
    assert result.checks[0].values == {"batches": 1, "expected": 2}
    result = check.evaluate(PARAMS, _data([*_after(), _after()[-1]]), "cpu")
    assert not result.passed
    assert result.checks[0].values == {"batches": 3, "expected": 2}


@pytest.mark.parametrize("shot", [[], [0.5, 1.0], "x", [SEED, 1.0, 2.0]])
def test_parameters_read_in_another_shape_are_interference(shot):
    data = _data(_after())
    data["observed"]["snapshots"][1] = shot
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")


@pytest.mark.parametrize(
    ("rise", "held", "right", "message"),
    [
        (0.4, MIB, True, "check.packed-rows.passed"),  # packed rows: a few rows of logits
        (2.0, MIB, True, "check.packed-rows.kernel"),  # a row per document, whatever the hook said
        (0.4, 60 * MIB, True, "check.packed-rows.held"),  # memory held before the run, freed in it
        (0.4, MIB, False, "check.packed-rows.untrained"),  # a run that did not train has no figure
    ],
)
def test_the_packed_rows_line_rests_on_the_kernel_s_count_of_the_one_run(rise, held, right, message):
    row = PARAMS["row_len"] * PARAMS["vocab"] * 8
    after = _after() if right else [_start()] * PARAMS["n_batches"]
    data = _data(after, rise=int(rise * PARAMS["docs_per_batch"] * row), held=held)
    if message == "check.packed-rows.held":  # freed as the run began: the mark stays where it was
        data["observed"]["memory"][2][3] = data["observed"]["memory"][1][3] = 300 * MIB + held
    result = check.evaluate(COUNTED, data, "cpu")
    assert result.checks[0].passed == right
    assert result.checks[1].message == message, result.checks[1]
    assert result.checks[1].passed == (message == "check.packed-rows.passed")
    if message == "check.packed-rows.kernel":
        assert result.diagnosis is not None and result.diagnosis.id == "one-document-per-row"


def test_without_a_watched_child_the_packed_rows_line_is_the_programs_word():
    data = _data(_after())
    data["observed"]["mode"] = "inline"
    result = check.evaluate(COUNTED, data, "cpu")
    assert result.passed and result.checks[1].message == "check.packed-rows.reported"


@pytest.mark.parametrize("dtype", check.PRECISIONS)
def test_a_loss_in_a_lower_precision_is_named_by_its_precision_not_a_mask(dtype):
    """Red team F1: a loop whose loss was computed in float32 (logits `.float()`, a float32
    cross-entropy) is refused by float64's tolerance, fairly, but its text blamed masking; the
    parameters follow the loss recomputed in that precision, and the text names it."""
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS, dtype)[1:]), "cpu")
    assert not result.passed and result.diagnosis is None
    line = result.checks[0]
    assert line.message == "check.packed-trajectory.precision", line
    assert line.values["dtype"] == dtype


def test_a_gap_of_rounding_s_size_is_not_called_a_mask():
    """Off by float32's rounding at another place than the recomputed loss's: the gap's size
    alone says rounding (the named mistakes are off by a tenth of the step or more)."""
    ref = check.trajectory(PARAMS)
    start = ref[0]
    after = [r + 1e-7 * (r - start).norm() / r.numel() ** 0.5 for r in ref[1:]]
    result = check.evaluate(PARAMS, _data(after), "cpu")
    assert not result.passed and result.diagnosis is None
    assert result.checks[0].message == "check.packed-trajectory.rounding", result.checks[0]
    for name in check.MISTAKES:  # what "a tenth of the step or more" rests on, at these rows
        errors = check._errors(
            [(torch.arange(r.numel()), r) for r in check.trajectory(PARAMS, name)[1:]], ref
        )
        assert max(errors) > 0.1 > check.ROUNDING, (name, errors)
