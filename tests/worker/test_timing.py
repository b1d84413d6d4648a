"""The "timing" kind (lesson 3, time-a-step): what the check computes from what the supervisor
saw, on made-up traces (the exercise's solution and mistakes are graded for real by
`treino lessons check`)."""

import pytest

from worker.checks import Interfered
from worker.checks import timing as check

PARAMS = {
    "runs": 2,
    "item_ms": 16,
    "kernel_ms": 5,
    "slow_ms": 27,
    "warmup_ms": 80,
    "warmup_kernels": 3,
    "min_syncs": 8,
}
KERNEL = {"kernel": 32.0, "idle": 5.0, "blocking": 10.0}  # the device's time per step in each run


def _events(number, kernel_ms, kernels=60, syncs=20, idle=0, blocking=False):
    """A run's events: ``kernels`` steps launched (the first 3 kernels the warm-up's, 80 ms
    longer), the first half over the loader (a batch asked for at each, a step taking
    max(loading, kernel)), the second on one batch; ``syncs`` calls of synchronize(), half of
    them spread evenly over each half, each after some work, and ``idle`` more that drain
    nothing. Each run has its own stretch of the clock, as the supervisor's runs follow one
    another."""
    events, t = [], 100_000.0 * number
    half = kernels // 2
    every = half // (syncs // 2) if syncs >= 2 else 0
    for i in range(kernels):
        loader = i < half
        length = kernel_ms + (80 if i < 3 else 0)
        events.append(["launch", number, t, -1])
        if loader:
            events.append(["asked", number, t, -1])
        events += [["begin", number, t, -1], ["kernel", number, t + length, -1]]
        # a blocking step waits for its batch, then for its own work: nothing overlaps
        t += ((16.0 + length if blocking else max(16.0, length)) if loader else length) + 0.2
        if every and (i % half + 1) % every == 0 and (i % half + 1) // every <= syncs // 2:
            events.append(["synchronize", number, t, -1])
    return events + [["synchronize", number, t, -1]] * idle


def _data(answers, slowed=("kernel", "idle"), **events):
    seen = [
        e
        for n, label in enumerate(slowed)
        for e in _events(n, KERNEL[label], blocking=label == "blocking", **events)
    ]
    return {"runs": answers, "observed": _observed(seen, slowed)}


def _observed(seen, slowed):
    """What the supervisor records of ``seen``: the child's syncs (launches, synchronize()
    calls), the kernels on its own timeline (its device runs them), the batches asked for of its
    item server."""
    return {
        "events": [e for e in seen if e[0] in ("launch", "synchronize")],
        "timeline": [e[:3] for e in seen if e[0] in ("begin", "kernel")],
        "items": {"asked": [[e[2] for e in seen if e[0] == "asked"]]},
        "events_dropped": 0,
        "slowed": list(slowed),
        "interfered": None,
    }


def _honest(label):
    step = max(16.0, KERNEL[label])
    bound = "compute" if label == "kernel" else "input"
    return {
        "type": "dict",
        "step_ms": step * 1.05,
        "spread_ms": [step, step * 1.1],
        "same_batch_ms": KERNEL[label],
        "bound": bound,
    }


def test_honest_figures_pass_whichever_order_the_supervisor_drew():
    for slowed in (("kernel", "idle"), ("idle", "kernel")):
        result = check.evaluate(PARAMS, _data([_honest(s) for s in slowed], slowed), "cpu")
        assert result.passed, [c for c in result.checks if not c.passed]
        assert {r["scenario"] for r in result.metrics["timing_runs"]} == {"device", "loading"}


def test_the_truth_is_the_supervisor_s_kernels_after_the_warm_up():
    runs = check._runs(PARAMS, _data([_honest("kernel"), _honest("idle")]))
    assert [round(r["kernel_ms"], 3) for r in runs] == [32.2, 5.2]  # each kernel, and the 0.2 ms between
    assert [round(r["step_ms"], 3) for r in runs] == [32.2, 16.0]  # max(loading, kernel)
    assert [r["bound"] for r in runs] == ["compute", "input"]


def _diagnosed(answers, **events):
    result = check.evaluate(PARAMS, _data(answers, **events), "cpu")
    assert not result.passed
    return result.diagnosis.id if result.diagnosis else None


def test_synchronize_calls_that_drain_nothing_do_not_make_repeats():
    """Eight calls, four of them with no work queued since the last: one timed measurement and a
    made-up spread around it (red team, issue 41: it passed every check on the count alone)."""
    device, loading = _honest("kernel"), _honest("idle")
    result = check.evaluate(PARAMS, _data([device, loading], syncs=4, idle=4), "cpu")
    assert not result.passed
    syncs = result.checks[0]
    assert syncs.message == "check.timing_syncs.idle" and syncs.values["repeats"] == 4
    assert result.diagnosis is None, "its spread is a range: the line says what is missing"
    assert check.evaluate(PARAMS, _data([device, loading], syncs=8, idle=2), "cpu").passed


def test_each_mistake_is_named_from_what_the_supervisor_counted_and_made():
    device, loading = _honest("kernel"), _honest("idle")
    assert _diagnosed([device, loading], syncs=0) == "no-synchronize"
    assert _diagnosed([device | {"same_batch_ms": 0.01}, loading]) == "host-launch-only"
    assert (
        _diagnosed([device | {"step_ms": 48.0, "spread_ms": [47.0, 49.0]}, loading], syncs=60)
        == "sync-every-step"
    )
    assert _diagnosed([device | {"spread_ms": [33.6, 33.6]}, loading], syncs=4) == "one-run-no-spread"
    assert _diagnosed([device | {"spread_ms": [32.0, 75.0]}, loading]) == "no-warm-up"
    assert _diagnosed([device | {"bound": "input"}, loading]) == "bound-from-the-wait"


def test_a_report_short_of_its_runs_or_of_its_figures_does_not_pass():
    short = check.evaluate(PARAMS, _data([_honest("kernel")]), "cpu")
    assert not short.passed and short.checks[0].message == "check.timing_answer.failed"
    empty = check.evaluate(PARAMS, _data([{"type": "dict"}, {"type": "dict"}]), "cpu")
    assert not empty.passed


def test_runs_the_supervisor_did_not_draw_are_interference():
    data = _data([_honest("kernel"), _honest("idle")])
    data["observed"]["slowed"] = ["kernel"]
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")


def test_a_report_with_no_runs_or_a_spread_of_one_number_fails_without_the_checks_raising():
    """Issue 41: the runs emptied from the report, or a spread that is not two numbers (the
    harness writes two), is a failed check, not a vacuous pass nor an exception of ours."""
    none = check.evaluate(PARAMS, _data([]), "cpu")
    assert not none.passed and none.checks[0].message == "check.timing_answer.failed"
    one = _honest("kernel") | {"spread_ms": [32.0]}
    result = check.evaluate(PARAMS, _data([one, _honest("idle")]), "cpu")
    spread = next(c for c in result.checks if c.name == "timing_spread")
    assert not spread.passed and spread.values["low"] == "—"
    assert result.diagnosis is not None and result.diagnosis.id == "one-run-no-spread"


def _repeats(number, kernel_ms, warm_up, steps=6, repeats=5, stall=0.0):
    """A learner's events: `warm_up` untimed steps over the loader, then `repeats` timed repeats
    of `steps` over it, a sync at each edge, then as many on one batch; the warm-up kernels 80 ms
    longer; `stall` ms more in the last loader repeat's last step."""
    events, t, made = [], 100_000.0 * number, 0

    def step(loader, extra=0.0):
        nonlocal t, made
        length = kernel_ms + (80 if made < 3 else 0)
        events.append(["launch", number, t, -1])
        if loader:
            events.append(["asked", number, t, -1])
        events.extend([["begin", number, t, -1], ["kernel", number, t + length, -1]])
        t += (max(16.0, length) if loader else length) + extra + 0.2
        made += 1

    for _ in range(warm_up):
        step(True)
    for loader in (True, False):
        for r in range(repeats):
            events.append(["synchronize", number, t, -1])
            for s in range(steps):
                step(loader, stall if (loader, r, s) == (True, repeats - 1, steps - 1) else 0.0)
            events.append(["synchronize", number, t, -1])
    return events


def test_a_stalled_repeat_is_not_taken_for_the_warm_up_but_a_timed_warm_up_is():
    seen = [
        e
        for n, label in enumerate(("kernel", "idle"))
        for e in _repeats(n, KERNEL[label], 3, stall=130.0 if label == "idle" else 0.0)
    ]
    data = {"observed": _observed(seen, ["kernel", "idle"])}
    device, loading = _honest("kernel"), _honest("idle")
    # a machine's stall of 130 ms in one 6-step repeat: 16 -> 37.7 ms a step in the loading run (2.4x)
    stalled = loading | {"spread_ms": [16.0, 37.7]}
    result = check.evaluate(PARAMS, data | {"runs": [device, stalled]}, "cpu")
    assert result.passed, [c for c in result.checks if not c.passed]
    # the warm-up timed, in the first of the repeats: 240 ms over 6 steps, 16 -> 56 ms a step
    timed = loading | {"spread_ms": [16.0, 56.0]}
    seen = [e for n, label in enumerate(("kernel", "idle")) for e in _repeats(n, KERNEL[label], 0, repeats=6)]
    data = {"observed": _observed(seen, ["kernel", "idle"])}
    result = check.evaluate(PARAMS, data | {"runs": [device, timed]}, "cpu")
    assert not result.passed and result.diagnosis is not None and result.diagnosis.id == "no-warm-up"


def test_figures_written_down_and_not_measured_do_not_pass():
    """Red team, issue 41: a program that times only the same-batch test and writes the loop's
    figure down as max(loading, its kernel) had every figure right. Each figure must be what the
    supervisor saw the learner's own stretches take, between two synchronize() calls."""
    device, loading = _honest("kernel"), _honest("idle")
    seen = []
    for n, label in enumerate(("kernel", "idle")):
        # every step on one batch: no stretch over the loader in either run
        seen += [e for e in _events(n, KERNEL[label]) if e[0] != "asked"]
    result = check.evaluate(
        PARAMS, {"runs": [device, loading], "observed": _observed(seen, ["kernel", "idle"])}, "cpu"
    )
    measured = next(c for c in result.checks if c.name == "timing_measured")
    assert not result.passed and not measured.passed
    assert measured.message == "check.timing_measured.no_loop"
    # a loop figure that its own stretches do not bear out: 16.8 reported where they took 32.2
    off = check.evaluate(
        PARAMS, _data([device | {"step_ms": 16.8, "spread_ms": [16.0, 17.0]}, loading]), "cpu"
    )
    measured = next(c for c in off.checks if c.name == "timing_measured")
    assert measured.message == "check.timing_measured.loop_off" and measured.values["seen"] == 32.2
    honest = check.evaluate(PARAMS, _data([device, loading]), "cpu")
    assert next(c for c in honest.checks if c.name == "timing_measured").passed


def test_a_spread_made_up_around_one_timing_does_not_pass():
    """Red team 3, issue 41: a warm-up synchronised at every step supplied the synchronize()
    calls, one timing of each figure was taken, and the spread was made up, its low end -1000.
    The supervisor saw one stretch of each (a step between two waits is not a stretch of the
    loop), and a spread must lie within the stretches it saw."""
    device, loading = _honest("kernel"), _honest("idle")
    one = check.evaluate(PARAMS, _data([device, loading], syncs=4, idle=8), "cpu")
    measured = next(c for c in one.checks if c.name == "timing_measured")
    assert not one.passed and measured.message == "check.timing_measured.no_loop"
    assert measured.values["count"] == 1
    made_up = check.evaluate(PARAMS, _data([device | {"spread_ms": [-1000.0, 34.0]}, loading]), "cpu")
    measured = next(c for c in made_up.checks if c.name == "timing_measured")
    assert not made_up.passed and measured.message == "check.timing_measured.spread_off"
    assert (measured.values["fastest"], measured.values["slowest"]) == (32.2, 32.2)


THREE = {**PARAMS, "runs": 3, "blocking_ms": 5}


def test_the_blocking_run_is_input_bound_at_loading_plus_kernel():
    """Issue 41, red team 4: a third run whose steps wait for their own work. Its truth is
    loading + kernel a step, the loader bounds it, and an answer that names it compute-bound
    (a verdict from the wait in next(): a smaller share of its step than the device run's)
    fails on the bound with the figures right."""
    slowed = ("blocking", "kernel", "idle")
    honest = {
        "type": "dict",
        "step_ms": 26.2,
        "spread_ms": [26.0, 27.0],
        "same_batch_ms": 10.2,
        "bound": "input",
    }
    runs = check._runs(THREE, _data([honest, _honest("kernel"), _honest("idle")], slowed))
    assert [r["scenario"] for r in runs] == ["blocking", "device", "loading"]
    assert round(runs[0]["step_ms"], 3) == 26.2 and round(runs[0]["kernel_ms"], 3) == 10.2
    assert runs[0]["bound"] == "input"
    result = check.evaluate(THREE, _data([honest, _honest("kernel"), _honest("idle")], slowed), "cpu")
    assert result.passed, [c for c in result.checks if not c.passed]
    waited = {**honest, "bound": "compute"}
    result = check.evaluate(THREE, _data([waited, _honest("kernel"), _honest("idle")], slowed), "cpu")
    assert [c.name for c in result.checks if not c.passed] == ["timing_bound"]
    assert result.diagnosis is not None and result.diagnosis.id == "bound-from-the-wait"
    assert result.diagnosis.values["scenario"].key == "timing.scenario.blocking"


def test_a_scenario_the_supervisor_never_draws_is_interference():
    data = _data([_honest("kernel"), _honest("idle")])
    data["observed"]["slowed"] = ["kernel", "sideways"]
    with pytest.raises(Interfered):
        check._runs(PARAMS, data)
