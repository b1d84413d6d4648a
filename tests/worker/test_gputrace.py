"""The "gputrace" kind (lesson 3, read-the-gpu-trace): what the check computes from a trace,
what the supervisor serves, and how answers are judged and diagnosed, without a sandbox.

The runs are made here as the sandbox makes them (seeds, order, ``perturb``), answered by the
exercise's own files, and judged by ``evaluate`` on the data the harness would report."""

import json
import math
import os
import runpy

import pytest

from worker.checks import Interfered
from worker.checks import gputrace as check
from worker.harness import gputrace as served
from worker.harness.items import Items

EXERCISE = check.LESSONS / "03-bottleneck" / "exercises" / "read-the-gpu-trace"
PARAMS = {"traces": "03-bottleneck/traces", "rounds": 2}


def _event(cat, ts, dur, name="k", tid=7):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur}


def _read_trace(name):
    path = EXERCISE / ("solution.py" if name == "solution" else f"mistakes/{name}.py")
    return runpy.run_path(str(path))["read_trace"]


def _data(read_trace, seeds, params=PARAMS, fed=None, bases=None):
    """What the harness would report: the learner's answers on each run's trace, the
    supervisor's seeds and slices served, and the digests of the bases it fed."""
    bases = bases or check.load(params)[0]
    order = served.order(seeds[0], len(bases), params["rounds"])
    runs, counts = [], []
    for number, seed in enumerate(seeds):
        trace = served.perturb(bases[order[number]], seed)
        counts.append(served.chunks(served.payload(trace)))
        runs.append(served.read_answer(read_trace(json.loads(json.dumps(trace)))))
    return {
        "runs": runs,
        "bases": fed if fed is not None else [served.digest(b) for b in bases],
        "observed": {"interfered": None, "items": {"seeds": [str(s) for s in seeds], "served": counts}},
    }


RUNS = (len(served.LOOPS) + len(served.EXTRA)) * PARAMS[
    "rounds"
]  # the lesson's three loops and the model's three, twice
SEEDS = [
    [11 + n for n in range(RUNS)],
    [901, 7, 88, 5, 3, 2, 41, 42, 43, 44, 45, 46],
    [2**40, *range(1, RUNS)],
]


def test_busy_is_the_union_of_the_device_over_the_whole_span_and_idle_counts_the_edges():
    trace = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
            _event("user_annotation", 0, 1000, "ProfilerStep#1"),  # the span: 0 .. 1000 µs
            _event("kernel", 100, 200),
            _event("kernel", 200, 200, tid=13),  # overlaps the first on another stream: once
            _event("gpu_memcpy", 600, 100),  # copies are work
            _event("gpu_user_annotation", 100, 600),  # a range's twin: not work
            _event("cuda_runtime", 0, 990),  # the host: not work
        ]
    }
    truth = check.measure(trace)
    assert truth["busy"] == pytest.approx(0.4)  # 100..400 and 600..700
    assert truth["idle_ms"] == pytest.approx(0.3)  # 700 .. 1000, the trailing edge
    assert truth["span_ms"] == pytest.approx(1.0)
    assert check.summed(trace) == pytest.approx(0.5)
    assert check.measure(trace, ("kernel",))["busy"] == pytest.approx(0.3)


def test_the_shipped_traces_are_what_the_model_makes_when_they_say_modelled():
    bases, labels, source = check.load(PARAMS)
    assert labels == [*served.LOOPS, *served.EXTRA.values()]
    extra = [served.model_trace(loop) for loop in served.EXTRA]  # graded whatever the lesson ships
    assert [served.digest(b) for b in bases[3:]] == [served.digest(m) for m in extra]
    if source != "modelled":
        pytest.skip("recorded traces: python -m bench.traces wrote them on a GPU")
    made = [served.model_trace(loop) for loop in served.LOOPS]
    assert [served.digest(b) for b in bases[:3]] == [served.digest(m) for m in made], (
        "the model changed: rewrite the traces with `python -m bench.traces --model`"
    )


@pytest.mark.parametrize("seed", range(12))
def test_the_prompts_rule_names_every_loop_under_every_change(seed):
    bases, labels, _ = check.load(PARAMS)
    solution = _read_trace("solution")
    for base, label in zip(bases, labels, strict=True):
        trace = served.perturb(base, seed)
        answer, truth = solution(trace), check.measure(trace)
        assert answer["bottleneck"] == label
        assert check.within_busy(answer["busy"], truth["busy"])
        assert check.within_idle(answer["idle_ms"], truth["idle_ms"])


def test_the_classic_wrong_methods_give_wrong_numbers_on_some_loop():
    """Each trap is set: the sum of overlapping kernels passes 100 % (compute), the ranges'
    GPU twins fill the launch gaps (launch), the kernels alone miss the copies (input), and the
    largest host label is the optimizer's sync (compute) or the launches of backward (launch)."""
    bases = dict(zip(served.LOOPS, check.load(PARAMS)[0][:3], strict=True))
    truth = {loop: check.measure(trace)["busy"] for loop, trace in bases.items()}
    assert check.summed(bases["compute"]) > 1.3
    twins = check.measure(bases["launch"], (*check.DEVICE, "gpu_user_annotation"))["busy"]
    assert twins > 0.9 > 0.5 > truth["launch"]
    assert check.measure(bases["input"], ("kernel",))["busy"] < truth["input"] / 5
    largest = {loop: max(check.host_labels(t).items(), key=lambda kv: kv[1])[0] for loop, t in bases.items()}
    assert largest == {"compute": "optimizer", "input": "data", "launch": "backward"}


@pytest.mark.parametrize("seed", range(12))
def test_the_models_extra_loops_make_memsets_and_the_idle_edges_matter(seed):
    """Under every change a run can get: on the zeroing loop the memsets are what makes it
    compute-bound (without them the share falls under half and the bottleneck changes); on the
    checkpoint loop the trace ends with the GPU idle for its longest stretch, so a span from the
    GPU's first work to its last gives another busy share and another idle stretch."""
    zeroing, checkpoint = (served.perturb(base, seed) for base in check.load(PARAMS)[0][3:5])
    truth = check.measure(zeroing)
    without = check.measure(zeroing, ("kernel", "gpu_memcpy"))
    assert truth["busy"] > 0.6 and without["busy"] < 0.3
    assert not check.within_busy(without["busy"], truth["busy"])
    truth = check.measure(checkpoint)
    edges = check.inner(checkpoint)
    assert truth["busy"] > 0.6 and edges["busy"] > 0.8
    assert truth["idle_ms"] > 3 * edges["idle_ms"]  # 5-7 ms at the end, 1.2-1.4 between steps
    start, end = check.span(checkpoint)
    last = max(e["ts"] + e["dur"] for e in checkpoint["traceEvents"] if e.get("cat") in check.DEVICE)
    assert (end - last) / 1000 == pytest.approx(truth["idle_ms"])  # the trailing edge


def test_a_change_is_a_realistic_run_of_the_same_loop():
    base = check.load(PARAMS)[0][1]
    once, again = served.perturb(base, 5), served.perturb(base, 5)
    assert once == again  # the check remakes what the supervisor served
    assert once != served.perturb(base, 6)
    cats = {e["cat"] for e in once["traceEvents"] if e["ph"] == "X"}
    assert cats <= set(served.KEEP) and {"kernel", "gpu_memcpy", "user_annotation"} <= cats
    starts = [e["ts"] for e in once["traceEvents"] if e["ph"] == "X"]
    assert starts != sorted(starts)  # not listed in time order
    assert all(e["dur"] >= 0 for e in once["traceEvents"] if e["ph"] == "X")


def test_every_loop_comes_rounds_times_in_a_drawn_order():
    orders = {tuple(served.order(seed, 3, 2)) for seed in range(20)}
    assert all(sorted(o) == [0, 0, 1, 1, 2, 2] for o in orders)
    assert len(orders) > 5


def test_the_supervisor_serves_each_runs_trace_in_slices():
    bases = check.load(PARAMS)[0]
    feed = served.Served(bases, 1)
    items = Items(served.MAX_CHUNKS, 0.0, feed.make, served.CHUNK)
    feed.items = items
    items.start()
    try:
        got = []
        for _ in range(3):
            items.open()
            got.append(served.fetch(items.address))
        seeds = items.seeds
        order = served.order(seeds[0], len(bases), 1)
        expected = [served.perturb(bases[order[n]], seed) for n, seed in enumerate(seeds)]
        assert got == expected
        assert items.result(0.0)["served"] == [served.chunks(served.payload(t)) for t in expected]
    finally:
        items.close()


@pytest.mark.parametrize("seeds", SEEDS)
def test_the_solution_passes(seeds):
    evaluation = check.evaluate(PARAMS, _data(_read_trace("solution"), seeds), "cpu")
    assert evaluation.passed, evaluation.checks
    assert evaluation.diagnosis is None
    assert evaluation.metrics["trace_source"] in ("modelled", "recorded")


@pytest.mark.parametrize(
    "mistake",
    [
        "summed-overlaps",
        "annotations-as-busy",
        "memcpy-ignored",
        "memset-ignored",
        "edges-left-out",
        "host-labels",
    ],
)
@pytest.mark.parametrize("seeds", SEEDS)
def test_each_mistake_is_named_with_the_learners_own_numbers(mistake, seeds):
    data = _data(_read_trace(mistake), seeds)
    evaluation = check.evaluate(PARAMS, data, "cpu")
    assert not evaluation.passed
    assert evaluation.diagnosis is not None and evaluation.diagnosis.id == mistake
    values = evaluation.diagnosis.values
    if mistake == "host-labels":
        # the first run it gets wrong: the launch loop's backward, or the pinned loop's data
        # range (its host waits there for the pin-memory thread, though the GPU is busy)
        assert (values["label"], values["answer"]) in (("backward", "compute"), ("data", "input"))
    else:
        reported = [r["busy"] * 100 for r in data["runs"]]
        assert any(math.isclose(values["reported"], r, abs_tol=0.01) for r in reported)


def test_a_host_label_named_as_the_answer_is_told_where_the_cpu_waited():
    def optimizer_said(trace):
        answer = _read_trace("solution")(trace)
        totals = check.host_labels(trace)
        return {**answer, "bottleneck": max(totals, key=totals.get)}

    evaluation = check.evaluate(PARAMS, _data(optimizer_said, SEEDS[0]), "cpu")
    assert evaluation.diagnosis is not None and evaluation.diagnosis.id == "host-labels"
    assert evaluation.diagnosis.values["answer"] in ("optimizer", "data", "backward", "checkpoint")


def test_a_percentage_and_microseconds_are_told_apart():
    def scaled(trace):
        answer = _read_trace("solution")(trace)
        return {**answer, "busy": answer["busy"] * 100, "idle_ms": answer["idle_ms"] * 1000}

    evaluation = check.evaluate(PARAMS, _data(scaled, SEEDS[0]), "cpu")
    messages = {c.name: c.message for c in evaluation.checks}
    assert messages["gpu_busy"] == "check.gpu_busy.percent"
    assert messages["gpu_idle"] == "check.gpu_idle.microseconds"
    assert evaluation.diagnosis is None


def test_an_answer_that_is_not_a_dict_says_what_to_return():
    evaluation = check.evaluate(PARAMS, _data(lambda trace: "compute", SEEDS[0]), "cpu")
    assert [c.message for c in evaluation.checks] == ["check.gpu_answer.not_dict"]
    assert evaluation.checks[0].values == {"type": "str"}


def test_what_the_learner_returns_is_kept_as_data():
    assert served.read_answer({"busy": float("nan"), "idle_ms": True, "bottleneck": "x" * 99}) == {
        "type": "dict",
        "busy": None,
        "idle_ms": None,
        "bottleneck": "x" * served.MAX_TEXT,
    }
    assert served.read_answer([1, 2]) == {"type": "list"}
    assert served.read_answer({"busy": "0.5"})["busy"] is None


def test_a_run_the_supervisor_did_not_serve_is_interference():
    data = _data(_read_trace("solution"), SEEDS[0])
    data["observed"]["items"]["served"][2] += 1  # a slice asked for twice
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")
    data = _data(_read_trace("solution"), SEEDS[0])
    data["runs"] = data["runs"][:4]  # fewer answers than runs served
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")
    data = _data(_read_trace("solution"), SEEDS[0])
    data["runs"][0]["busy"] = "half"
    with pytest.raises(Interfered):
        check.evaluate(PARAMS, data, "cpu")


def test_traces_other_than_the_lessons_files_are_our_fault_not_the_learners():
    data = _data(_read_trace("solution"), SEEDS[0], fed=["0" * 64] * 5)
    with pytest.raises(RuntimeError, match="not the lesson's trace files"):
        check.evaluate(PARAMS, data, "cpu")


def test_the_trace_files_are_read_once_until_they_change(tmp_path, monkeypatch):
    folder = tmp_path / "03-bottleneck" / "traces"
    folder.mkdir(parents=True)
    source = check.LESSONS / "03-bottleneck" / "traces"
    for path in source.glob("*.json"):
        (folder / path.name).write_text(path.read_text())
    monkeypatch.setattr(check, "LESSONS", tmp_path)
    first = check.load(PARAMS)
    assert check.load(PARAMS) is first
    meta = json.loads((folder / "traces.json").read_text())
    meta["source"] = "recorded"
    (folder / "traces.json").write_text(json.dumps(meta))
    os.utime(folder / "traces.json", (1, 1))
    assert check.load(PARAMS)[2] == "recorded"


def test_what_a_grader_would_send_with_the_job_is_the_lessons_traces_and_no_label():
    inputs = check.job_inputs(PARAMS)
    assert list(inputs) == ["bases"]
    bases, labels, _ = check.load(PARAMS)
    assert [served.digest(b) for b in inputs["bases"]] == [served.digest(b) for b in bases]
    assert not any(label in json.dumps(inputs) for label in ('"bottleneck"', "traces.json"))


def _recorded(tmp_path, monkeypatch):
    """A lessons folder whose traces say they were recorded (here: the model's, changed)."""
    folder = tmp_path / "03-bottleneck" / "traces"
    folder.mkdir(parents=True)
    meta = json.loads((check.LESSONS / "03-bottleneck" / "traces" / "traces.json").read_text())
    meta["source"] = "recorded"
    (folder / "traces.json").write_text(json.dumps(meta))
    for loop in served.LOOPS:
        trace = served.perturb(served.model_trace(loop), 77)
        (folder / meta["loops"][loop]["trace"]).write_text(json.dumps(trace))
    monkeypatch.setattr(check, "LESSONS", tmp_path)


def test_recorded_files_sent_with_the_job_are_what_is_judged(tmp_path, monkeypatch):
    _recorded(tmp_path, monkeypatch)
    evaluation = check.evaluate(PARAMS, _data(_read_trace("solution"), SEEDS[1]), "cpu")
    assert evaluation.passed and evaluation.metrics["trace_source"] == "recorded"


def test_the_grader_sends_the_lessons_traces_and_a_recorded_set_is_what_is_graded(
    tmp_path, monkeypatch, exercise, grade
):
    """Through the real grader and sandbox: traces recorded on a GPU reach the sandbox with the
    job (the sandbox cannot read lessons/), and the verdict is judged on them."""
    _recorded(tmp_path, monkeypatch)
    solution = (EXERCISE / "solution.py").read_bytes()
    verdict = grade(exercise("read-the-gpu-trace"), solution)
    assert verdict["status"] == "passed", verdict
    assert verdict["metrics"]["trace_source"] == "recorded"
    mistake = (EXERCISE / "mistakes" / "summed-overlaps.py").read_bytes()
    assert grade(exercise("read-the-gpu-trace"), mistake)["diagnosis"]["id"] == "summed-overlaps"
