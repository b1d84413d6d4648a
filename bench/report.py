"""The figures as one Markdown page: machine, results, ratios against the targets, breakdown."""

import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.traffic import POLL_SECONDS

NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
STATIC_FILE = "/static/css/app.css"  # what the lesson page is compared with
# Targets reported against, not asserted (issue 8)
WARM_OVER_FLOOR_MS = 50
E2E_OVER_COLD = 0.2
LESSON_OVER_STATIC = 0.5
# Targets of the fork path (issue 14), against a cold `treino check`
RESUBMIT_OVER_COLD = 0.1
CLASS_OVER_COLD = 2.0


def p50(ms: list[float]) -> float:
    return statistics.median(ms)


def p95(ms: list[float]) -> float:
    return statistics.quantiles(ms, n=100, method="inclusive")[94] if len(ms) > 1 else ms[0]


@dataclass
class Samples:
    """Milliseconds per run, and the verdict metrics of each where there is one."""

    ms: list[float] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)


@dataclass
class Results:
    exercise: str
    ms: dict[str, Samples] = field(default_factory=dict)  # in-process, cold, warm
    e2e: dict[str, list[float]] = field(default_factory=dict)  # per backend
    pick_up: dict[str, list[float]] = field(default_factory=dict)
    rps: dict[tuple[str, str], float] = field(default_factory=dict)  # (page, backend)
    per_minute: dict[int, float] = field(default_factory=dict)  # workers → verdicts/min
    forks: Any = None  # bench.forks.ForkFigures: the fork path's
    bursts: list[Any] = field(default_factory=list)  # bench.load.Burst: a class at once (issue 26)

    def add_ms(self, name: str, samples: Samples) -> None:
        self.ms[name] = samples


def _row(label: str, ms: list[float]) -> str:
    return f"| {label} | {p50(ms):,.0f} ms | {p95(ms):,.0f} ms | {len(ms)} |"


def _mark(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _metric(samples: Samples, key: str) -> float | None:
    values = [m[key] for m in samples.metrics if m.get(key) is not None]
    return statistics.median(values) if values else None


def _breakdown(results: Results) -> list[str]:
    columns: dict[str, Samples] = {n: results.ms[n] for n in ("cold", "warm") if n in results.ms}
    if results.forks is not None and results.forks.parts.ms:
        columns["fork"] = results.forks.parts
    kinds = list(columns.values())
    lines = ["| Part (median ms) | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    parts = [
        (
            "fork: the job's sandbox, forked ahead after the previous job, taken and put in its "
            "cgroup (`start_ms`)",
            "start_ms",
        ),
        ("the learner's function, instrumented (harness `run_ms`)", "harness_run_ms"),
        ("hand-off → the harness says done (`sandbox_ms`: the job in its sandbox)", "sandbox_ms"),
        ("checks on the trace (`check_ms`)", "check_ms"),
    ]
    for label, key in parts:
        cells = [_metric(s, key) for s in kinds]
        lines.append(f"| {label} | " + " | ".join("—" if c is None else f"{c:,.0f}" for c in cells) + " |")
    outside = []
    for s in kinds:
        rest = [
            total - m.get("start_ms", 0) - m.get("sandbox_ms", 0) - m.get("check_ms", 0)
            for total, m in zip(s.ms, s.metrics, strict=True)
        ]
        outside.append(f"{statistics.median(rest):,.0f}")
    lines.append(
        "| `grade()` before hand-off and after the job (cold: the sandbox's start and "
        "torch import; warm: taking a sandbox; fork: the template's turn), killing it, "
        "parsing, the verdict | " + " | ".join(outside) + " |"
    )
    lines.append(
        "| total, `grade()` call to verdict | " + " | ".join(f"{p50(s.ms):,.0f}" for s in kinds) + " |"
    )
    if results.forks is not None:
        for backend, ms in results.forks.pick_up.items():
            how = "LISTEN/NOTIFY" if backend == "postgresql" else "the worker polls"
            empty = " | ".join("—" for _ in kinds[:-1])
            lines.append(
                f"| queue pick-up on the fork path, {NAMES[backend]} ({how}; the resubmits, "
                f"outside `grade()`) | {empty} | {p50(ms):,.0f} |"
            )
    return lines


def _fork_rows(forks) -> list[str]:
    """Latency rows of the fork path."""
    rows = []
    if forks.cli_cold:
        rows.append(
            _row(
                "`treino check` from a new process: its own start and torch, then a fresh "
                'sandbox that imports torch ("cold `treino check`")',
                forks.cli_cold,
            )
        )
    if forks.parts.ms:
        rows.append(_row("Fork server: `grade()`, a fork of a warm template → verdict", forks.parts.ms))
    for backend, ms in forks.resubmit.items():
        rows.append(
            _row(
                f"Resubmit, {NAMES[backend]}: one learner, {len(ms)} submissions back to "
                f"back (submit → final verdict, polled every {POLL_SECONDS * 1000:.0f} ms), "
                "`treino serve` + one `treino worker` forking its jobs",
                ms,
            )
        )
    return rows


def _fork_ratios(results: Results) -> list[str]:
    forks = results.forks
    if forks is None or not forks.cli_cold:
        return []
    cold = p50(forks.cli_cold)
    sandbox = p50(results.ms["cold"].ms) if "cold" in results.ms else None
    lines = []
    for backend, ms in forks.resubmit.items():
        ratio = p50(ms) / cold
        also = f" ({p50(ms) / sandbox:.3f} of a cold sandbox's `grade()`)" if sandbox else ""
        lines.append(
            f"| resubmit p50 ÷ cold `treino check`, {NAMES[backend]} | {ratio:.3f}{also} | "
            f"≤ {RESUBMIT_OVER_COLD} | {_mark(ratio <= RESUBMIT_OVER_COLD)} |"
        )
    for backend, ms in forks.classroom.items():
        ratio = ms / cold
        lines.append(
            f"| a class of {forks.learners} all graded ÷ cold `treino check`, "
            f"{NAMES[backend]} | {ratio:.2f} | ≤ {CLASS_OVER_COLD:g} | "
            f"{_mark(ratio <= CLASS_OVER_COLD)} |"
        )
    if forks.same is not None:
        files, differ = forks.same
        lines.append(
            f"| verdicts of the fork path = the single-use path's (every solution and "
            f"mistake file) | {files - len(differ)} of {files} | all | {_mark(not differ)} |"
        )
    return lines


def markdown(about: dict[str, str], results: Results, argv: list[str]) -> str:
    command = "make bench" if not argv else "python -m bench " + " ".join(argv)
    lines = [
        "# Benchmarks",
        "",
        f"Written by `{command}` (bench/); run it again to refresh this page. One machine, often "
        "shared and noisy: read the ratios first, the milliseconds are this machine's. Nothing "
        "here is asserted by `make test`.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *[f"| {key} | {value} |" for key, value in about.items()],
        "",
        f"## Latency — `{results.exercise}`, its `solution.py`",
        "",
        "| Measurement | p50 | p95 | n |",
        "|---|---:|---:|---:|",
    ]
    labels = {
        "in-process": "Check in-process: the harness's `runtime.main` and the checks in one "
        "process, no sandbox (the floor)",
        "cold": "Cold sandbox: `grade()`, a fresh sandbox that imports torch",
        "warm": "Warm pool: `grade()`, hand-off to a warm sandbox → verdict",
    }
    lines += [_row(label, results.ms[name].ms) for name, label in labels.items() if name in results.ms]
    for backend, ms in results.e2e.items():
        lines.append(
            _row(
                f"End to end, {NAMES[backend]}: HTTP submit → final verdict (polled every "
                f"{POLL_SECONDS * 1000:.0f} ms), `treino serve` + one `treino worker`",
                ms,
            )
        )
    for backend, ms in results.pick_up.items():
        how = "LISTEN/NOTIFY" if backend == "postgresql" else "the worker polls"
        lines.append(_row(f"Pick-up, {NAMES[backend]}: enqueued → claimed ({how})", ms))
    if results.forks is not None:
        lines += _fork_rows(results.forks)
    lines += ["", "## Throughput", "", "| Measurement | Result |", "|---|---:|"]
    if results.forks is not None:
        for backend, ms in results.forks.classroom.items():
            lines.append(
                f"| A class at once, {NAMES[backend]}: {results.forks.learners} learners submit "
                f"together (fork path, one worker); the last verdict in after | "
                f"{ms / 1000:,.1f} s |"
            )
    for (page, backend), rps in results.rps.items():
        what = "lesson page" if page == "lesson" else f"static file `{STATIC_FILE}`"
        lines.append(
            f"| {what.capitalize()}, {NAMES[backend]}: 8 keep-alive connections on loopback "
            f"| {rps:,.0f} req/s |"
        )
    for workers, rate in results.per_minute.items():
        lines.append(
            f"| Queue, PostgreSQL: submissions sent at once, {workers} worker"
            f"{'s' if workers > 1 else ''} | {rate:,.1f} verdicts/min |"
        )
    lines += [
        "",
        "## Ratios and targets (reported, not asserted)",
        "",
        "| Ratio | Value | Target | |",
        "|---|---:|---|---|",
    ]
    if {"in-process", "warm"} <= results.ms.keys():
        floor, warm = p50(results.ms["in-process"].ms), p50(results.ms["warm"].ms)
        lines.append(
            f"| warm ÷ in-process (p50) | {warm / floor:.2f} ({warm - floor:+,.0f} ms) | "
            f"≤ in-process + {WARM_OVER_FLOOR_MS} ms | "
            f"{_mark(warm <= floor + WARM_OVER_FLOOR_MS)} |"
        )
    if "cold" in results.ms:
        cold = p50(results.ms["cold"].ms)
        for backend, ms in results.e2e.items():
            ratio = p50(ms) / cold
            lines.append(
                f"| end-to-end p50 ÷ cold, {NAMES[backend]} | {ratio:.3f} | "
                f"≤ {E2E_OVER_COLD} | {_mark(ratio <= E2E_OVER_COLD)} |"
            )
    for (page, backend), rps in results.rps.items():
        if page == "lesson" and ("static", backend) in results.rps:
            ratio = rps / results.rps[("static", backend)]
            lines.append(
                f"| lesson page ÷ static file (req/s), {NAMES[backend]} | {ratio:.2f} | "
                f"≥ {LESSON_OVER_STATIC} | {_mark(ratio >= LESSON_OVER_STATIC)} |"
            )
    lines += _fork_ratios(results)
    if results.forks is not None and results.forks.same and results.forks.same[1]:
        lines += [
            "",
            "Verdicts that differ between the two paths:",
            "",
            *[f"- {line}" for line in results.forks.same[1]],
        ]
    if {"cold", "warm"} & results.ms.keys() or results.forks is not None:
        lines += [
            "",
            "## Where a graded submission's time goes",
            "",
            "From the verdicts' own metrics (medians).",
            "",
            *_breakdown(results),
        ]
    if results.bursts:
        from bench import load

        lines += ["", "## A class at once", "", load.ABOUT, "", *load.table(results.bursts)]
    lines += [
        "",
        "## How it is measured",
        "",
        "- In-process: one intra-op thread, as in the sandbox (`OMP_NUM_THREADS=1`); the "
        "reference is computed once before timing, as a running worker has it cached.",
        "- Warm pool and end to end: each submission starts once every sandbox of the pool is "
        "warm (the tree's CPU time is flat), a learner who reads between submissions; as in "
        "production, the used sandbox is reaped and its replacement warms up after the job, "
        "while the verdict goes out.",
        "- End to end: a new learner (cookie jar) per submission, one at a time; pick-up from "
        "the rows' `created_at` and `started_at`.",
        "- Fork path (issue 14): workers with `TREINO_SANDBOX_START=fork` (one template each, "
        "jobs forked from it); the other rows use `exec`, warm pools of single-use sandboxes. "
        "Cold `treino check` is the command run from a new process on the solution. Resubmit: "
        "one learner (one cookie jar) sends again the moment each verdict is in, starting "
        "from a quiet worker. A class: that many learners (a cookie jar each) send at once; "
        "from the first submission sent to the last verdict seen by polling. Same verdicts: "
        "every exercise's solution and mistake files graded in single-use sandboxes and in "
        "forks; compared are the status, the named mistake, and each check's name, outcome "
        "and message (not the figures in them, timings among them).",
        "- Queue: the submissions are sent at once to warm pools; verdicts per minute from the "
        "first `created_at` to the last `finished_at`. Pages: one returning visitor, for a "
        "fixed time, after one request that warms the caches.",
        "",
    ]
    return "\n".join(lines)
