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


def _start():
    model, _ = sequences.packing(PARAMS)
    return tensors.flat(model.parameters()).tolist()


def _data(after, rows=None, forwards=None):
    """A trace whose supervisor read ``after`` (the parameters after each batch) and counted one
    call of the model per batch, on ``rows`` rows each (the packed count unless given)."""
    before = [_start(), *[a.tolist() for a in after[:-1]]]
    rows = list(check.packed_rows(PARAMS)) if rows is None else rows
    events = []
    for i in range(len(before)):
        events.append(["batch", i, float(i), i])
        if i < len(rows):  # the hook sends the call's token positions: rows of row_len
            events.append(["forward", rows[i] * PARAMS["row_len"], float(i) + 0.5, -1])
    final = after[-1].tolist()
    count = len(rows) if forwards is None else forwards
    observed = {
        "mode": "fork",
        "counts": {"batch": len(before), "forward": count},
        "events": events,
        "snapshots": before,
        "final_params": final,
        "interfered": None,
    }
    return {"final_params": final, "observed": observed}


def test_a_loop_that_trains_each_document_as_if_alone_on_packed_rows_passes():
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS)), "cpu")
    assert result.passed, result.checks
    assert result.diagnosis is None
    assert result.metrics["model_rows"] == list(check.packed_rows(PARAMS))


@pytest.mark.parametrize("name", sorted(check.MISTAKES))
def test_each_mistake_is_named_by_the_trajectory_it_gives(name):
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS, name)), "cpu")
    assert not result.passed
    assert result.checks[0].message == "check.packed-trajectory.failed"
    assert result.diagnosis is not None and result.diagnosis.id == name


def test_one_document_per_row_trains_right_and_fails_on_its_rows():
    rows = [PARAMS["docs_per_batch"]] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS), rows=rows), "cpu")
    assert [c.passed for c in result.checks] == [True, False]
    assert result.diagnosis.id == "one-document-per-row"
    assert result.diagnosis.values["rows"] == PARAMS["docs_per_batch"]


def test_documents_in_padded_slots_of_one_long_row_fail_on_their_positions():
    """Not packed, though one row: each document in a slot of its own padded to row_len, the
    slots end to end (red team, issue 41: it passed when only rows were counted)."""
    slots = [PARAMS["docs_per_batch"] * PARAMS["row_len"]] * PARAMS["n_batches"]
    data = _data(check.trajectory(PARAMS))
    events = data["observed"]["events"]
    forwards = [e for e in events if e[0] == "forward"]
    for event, positions in zip(forwards, slots, strict=True):
        event[1] = positions
    result = check.evaluate(PARAMS, data, "cpu")
    assert [c.passed for c in result.checks] == [True, False]
    assert result.checks[1].values["positions"] == slots[0]
    assert result.diagnosis.id == "one-document-per-row"


def test_a_call_per_document_fails_on_the_supervisor_s_count_whatever_rows_it_said():
    n = PARAMS["docs_per_batch"] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS), rows=[1] * n), "cpu")
    assert not result.passed
    assert result.checks[1].message == "check.packed-rows.calls"
    # a model never called (its submodules used by hand) is no pass either
    assert not check.evaluate(PARAMS, _data(check.trajectory(PARAMS), rows=[]), "cpu").passed


def test_a_loop_that_trains_nothing_fails_unnamed():
    still = [torch.tensor(_start(), dtype=torch.float64)] * PARAMS["n_batches"]
    result = check.evaluate(PARAMS, _data(still), "cpu")
    assert not result.passed and result.diagnosis is None


def test_a_short_run_is_not_a_pass():
    result = check.evaluate(PARAMS, _data(check.trajectory(PARAMS)[:1]), "cpu")
    assert not result.passed
    assert result.checks[0].values == {"batches": 1, "expected": 2}


def test_reported_parameters_that_differ_from_the_observed_ones_are_interference():
    data = _data(check.trajectory(PARAMS))
    data["final_params"] = [v * 1.001 for v in data["final_params"]]
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")
    data["final_params"] = None
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")


# the memory run (issue 41): the hook's positions are the program's report, so a pass on packed
# rows rests on the kernel's count of the process on a batch of many short documents
MEMORY = {
    **PARAMS,
    "memory_vocab": 64,
    "memory_row_len": 16,
    "memory_min_doc": 2,
    "memory_max_doc": 5,
    "memory_docs": 8,
}
MIB = 1 << 20


def _with_memory_run(rise, *, held=MIB, trained=True, fetched=1):
    """``_data`` of a right maths run, then a memory run whose layers the supervisor read at its
    end (after one right SGD step, or left where they started) and whose memory rose by ``rise``
    at its peak, ``held`` more than at the watch as it began."""
    data = _data(check.trajectory(PARAMS))
    seen = data["observed"]
    layers = check.memory_step(MEMORY) if trained else check.memory_start(MEMORY)
    seen["snapshots"].append(seen["final_params"] + layers.tolist())
    seen["events"].append(["memory-end", -1, 9.0, len(seen["snapshots"]) - 1])
    seen["counts"]["memory-batch"] = fetched
    base = 300 * MIB
    seen["memory"] = [
        ["watch-memory", -1, base, base, -1, -1],
        ["memory-start", -1, base + held, base + held, -1, -1],
        ["memory-end", -1, base + held, base + held + rise, -1, -1],
    ]
    seen["memory_lowered"] = 0
    return data


def test_the_memory_runs_scenario_packs_into_few_rows_of_many():
    packed, docs = check.memory_rows(MEMORY)
    assert docs == MEMORY["memory_docs"] and packed < docs / 2


@pytest.mark.parametrize(
    ("rise", "held", "trained", "message"),
    [
        (0.4, MIB, True, "check.packed-rows.passed"),  # packed rows: a few rows of logits
        (2.0, MIB, True, "check.packed-rows.kernel"),  # a row per document, whatever the hook said
        (0.4, 60 * MIB, True, "check.packed-rows.held"),  # memory held before the run, freed in it
        (0.4, MIB, False, "check.packed-rows.untrained"),  # a run that did not train has no figure
    ],
)
def test_the_packed_rows_line_rests_on_the_memory_run(rise, held, trained, message):
    row = MEMORY["memory_row_len"] * MEMORY["memory_vocab"] * 8
    data = _with_memory_run(int(rise * MEMORY["memory_docs"] * row), held=held, trained=trained)
    if message == "check.packed-rows.held":  # freed as the run began: the mark stays where it was
        data["observed"]["memory"][2][3] = data["observed"]["memory"][1][3] = 300 * MIB + held
    result = check.evaluate(MEMORY, data, "cpu")
    assert result.checks[0].passed  # the maths run is right in every case
    assert result.checks[1].message == message, result.checks[1]
    assert result.checks[1].passed == (message == "check.packed-rows.passed")
    if message == "check.packed-rows.kernel":
        assert result.diagnosis is not None and result.diagnosis.id == "one-document-per-row"


def test_a_memory_run_that_fetched_nothing_has_no_figure():
    result = check.evaluate(MEMORY, _with_memory_run(0, fetched=0), "cpu")
    assert result.checks[1].message == "check.packed-rows.untrained"


def test_without_a_watched_child_the_packed_rows_line_is_the_programs_word():
    data = _data(check.trajectory(PARAMS))
    data["observed"]["mode"] = "inline"
    result = check.evaluate(MEMORY, data, "cpu")
    assert result.passed and result.checks[1].message == "check.packed-rows.reported"
