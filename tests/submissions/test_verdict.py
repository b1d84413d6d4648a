"""The verdict view: pass/fail at a glance, the named mistake, checks, figures as bar tables,
plain words for timeouts, refusals and our own trouble; runs read "Ran", not pass/fail."""

from datetime import timedelta

import pytest
from sqlalchemy import update

from app.db import utcnow
from app.submissions.figures import figures
from app.submissions.models import Submission
from contracts.verdict import record
from tests.conftest import html
from worker.runner import Worker

EXERCISE_URL = "/lessons/gradient-accumulation/exercises/accumulate"
HTMX = {"HX-Request": "true"}

NOT_SCALED = {  # what `treino check … loss-not-scaled.py --json` printed
    "version": 1,
    "exercise": "gradient-accumulation/accumulate",
    "status": "failed",
    "diagnosis": {
        "id": "loss-not-scaled",
        "title": "The loss is not divided by accum_steps",
        "explanation": "Every update was 4.00× the large-batch one.",
    },
    "checks": [
        {"name": "Optimizer steps", "status": "passed", "message": "3 optimizer steps."},
        {"name": "Parameters after each step", "status": "failed", "message": "Differ from step 1."},
        {"name": "Activation memory", "status": "passed", "message": "1,808 bytes."},
    ],
    "metrics": {
        "optimizer_steps": 3,
        "reference_optimizer_steps": 3,
        "update_ratio": 4.0,
        "peak_activation_bytes": 1808,
        "reference_peak_activation_bytes": 1808,
        "large_batch_peak_activation_bytes": 7232,
        "device": "cpu",
        "sandbox_ms": 393,
        "check_ms": 1375,
    },
    "output": "step 1\nstep 2\n",
}


def finished(app, client, verdict: dict, *, mode: str = "submit"):
    """A submission of this client's learner, finished with `verdict`; its page."""
    sub_id = client.post(
        "/api/lessons/gradient-accumulation/exercises/accumulate/submissions",
        json={"code": "x = 1", "mode": mode},
    ).json()["id"]
    with app.state.sessionmaker.begin() as session:
        session.execute(
            update(Submission)
            .where(Submission.id == sub_id)
            .values(status=verdict["status"], verdict=verdict, active_owner=None)
        )
    return html(client.get(f"/submissions/{sub_id}"))


def test_a_failed_verdict_names_the_mistake_and_draws_the_figures(client, app):
    page = finished(app, client, NOT_SCALED)
    verdict = page.select_one(".verdict-card")
    assert "verdict-failed" in verdict["class"]
    assert verdict.select_one(".verdict-title").get_text() == "Not yet right"
    assert "2 of 3 checks passed" in verdict.select_one(".verdict-sub").get_text()
    assert verdict.select_one(".diagnosis h4").get_text() == "The loss is not divided by accum_steps"
    assert [li["class"][-1] for li in verdict.select(".checks li")] == [
        "check-passed",
        "check-failed",
        "check-passed",
    ]
    charts = {f["class"][-1]: f for f in verdict.select("figure")}
    assert set(charts) == {"figure-update", "figure-memory"}, "3 steps against 3 is a fact, not a chart"
    memory = charts["figure-memory"]
    assert [td.get_text() for td in memory.select(".bar-value")] == ["1,808 B", "1,808 B", "7,232 B"]
    assert memory.select_one(".bar-naive .bar-fill")["width"] == "100.00"
    assert memory.select_one(".bar-yours .bar-fill")["width"] == "25.00"
    assert charts["figure-update"].select(".bar-value")[0].get_text() == "4.00×"
    assert ("Running your code", "0.4 s") in [
        (d.select_one("dt").get_text(), d.select_one("dd").get_text()) for d in verdict.select(".facts div")
    ]
    assert verdict.select_one("details.output pre").get_text() == "step 1\nstep 2\n"


HOOKSTEP_SOLUTION = {  # what `treino check model-memory/step-in-backward solution.py --json` printed
    "version": 1,
    "exercise": "model-memory/step-in-backward",
    "status": "passed",
    "diagnosis": None,
    "checks": [],
    "metrics": {
        "peak_alive_gradients": 1,
        "reference_peak_alive_gradients": 24,
        "peak_gradient_bytes": 2097152,
        "reference_peak_gradient_bytes": 25214976,
        "optimizer_step_calls": 48,
        "device": "cpu",
        "sandbox_ms": 416,
    },
    "output": "",
}


def test_lesson_5_draws_its_gradients_against_the_plain_loop(client, app):
    """Issue 31: the gradient meters, in the same bar tables as the other figures."""
    verdict = finished(app, client, HOOKSTEP_SOLUTION).select_one(".verdict-card")
    charts = {f["class"][-1]: f for f in verdict.select("figure.figure")}
    assert set(charts) == {"figure-gradients-alive", "figure-gradients"}
    alive, memory = charts["figure-gradients-alive"], charts["figure-gradients"]
    assert [th.get_text() for th in memory.select("th")] == ["Yours", "Plain loop"]
    assert [td.get_text() for td in alive.select(".bar-value")] == ["1", "24"]
    assert [td.get_text() for td in memory.select(".bar-value")] == ["2.0 MiB", "24.0 MiB"]
    assert alive.select_one(".bar-yours .bar-fill")["width"] == "4.17"
    assert memory.select_one(".bar-naive .bar-fill")["width"] == "100.00"
    assert "left 1 gradient in .grad (2.0 MiB)" in alive.select_one(".figure-summary").get_text()
    assert ("Optimizer step calls", "48") in [
        (d.select_one("dt").get_text(), d.select_one("dd").get_text()) for d in verdict.select(".facts div")
    ]


@pytest.mark.parametrize(
    ("verdict", "words"),
    [
        ({"status": "error", "reason": "worker-trouble"}, "stopped several times"),
        ({"status": "error", "reason": "grader-crashed"}, "bug on our side"),
        ({"status": "error", "reason": "exercise-gone"}, "changed or was removed"),
        (
            {"status": "timeout", "checks": [{"name": "Run", "status": "failed", "message": "60 s"}]},
            "past the time limit",
        ),
        (
            {"status": "rejected", "checks": [{"name": "Input", "status": "failed", "message": "too big"}]},
            "was not accepted",
        ),
    ],
)
def test_trouble_timeouts_and_refusals_each_have_plain_words(client, app, verdict, words):
    full = {
        "version": 1,
        "exercise": "gradient-accumulation/accumulate",
        "diagnosis": None,
        "checks": [],
        "metrics": {},
        "output": "",
        **verdict,
    }
    page = finished(app, client, full)
    assert words in page.select_one(".verdict-plain").get_text()


def test_a_run_reads_ran_with_its_losses_and_no_checks(client, app):
    def run_only(exercise, code, run_only=False, cancel=None):
        assert run_only
        return record(exercise.id, "passed", metrics={"optimizer_steps": 3, "losses": [1.1, 1.0, None, 0.9]})

    response = client.post(f"{EXERCISE_URL}/submissions", data={"code": "x", "mode": "run"}, headers=HTMX)
    poll = html(response).select_one("#submission-status")["hx-get"]
    with Worker(app.state.settings, grade=run_only, course=app.state.course) as worker:
        assert worker.run_once()
    page = html(client.get(poll, headers=HTMX))
    verdict = page.select_one(".verdict-card")
    assert "verdict-ran" in verdict["class"] and verdict.select_one(".verdict-title").get_text() == "Ran"
    assert not verdict.select(".checks")
    rows = verdict.select(".figure-losses tbody tr")
    assert [r.select_one("th").get_text() for r in rows] == [
        "Start",
        "After step 1",
        "After step 2",
        "After step 3",
    ]
    assert rows[2].select_one(".bar-value").get_text() == "—"
    stored = client.get(f"/api/submissions/{poll.rsplit('/', 1)[1]}").json()
    assert stored["mode"] == "run" and stored["verdict"]["mode"] == "run"
    history = html(client.get(EXERCISE_URL)).select_one("#history tbody tr")
    assert "Ran" in history.get_text() and "Run, not graded" in history.get_text()


def test_while_running_the_status_shows_the_time_since_it_started(client, app):
    response = client.post(f"{EXERCISE_URL}/submissions", data={"code": "x"}, headers=HTMX)
    poll = html(response).select_one("#submission-status")["hx-get"]
    started = utcnow() - timedelta(seconds=7)
    with app.state.sessionmaker.begin() as session:
        session.execute(update(Submission).values(status="running", started_at=started))
    status = html(client.get(poll, headers=HTMX)).select_one("#submission-status")
    waited = (utcnow() - started).total_seconds()  # 7 s, and however long this machine took since
    assert status["hx-trigger"] == "changed"
    assert status.select_one(".elapsed")["data-plural"] == "99 seconds", "the page counts on"
    assert status.select_one(".elapsed").get_text() in {f"{s} seconds" for s in range(7, int(waited) + 1)}


def test_figures_are_empty_when_nothing_was_measured():
    assert not figures({"metrics": {}})


# ---------------------------------------------------------------- records: rendered when read


def _not_scaled_record() -> dict:
    """What the worker stores for loss-not-scaled: message keys and values, no texts."""
    from contracts.messages import Phrase, Sci
    from contracts.verdict import check_record, record, seal

    checks = [
        check_record("steps", True, "check.steps.passed", {"steps": 3}),
        check_record(
            "trajectory",
            False,
            "check.trajectory.diverged",
            {"step": 1, "error": Sci(3.0), "ratio": Sci(4.0)},
        ),
    ]
    diagnosis = (
        "loss-not-scaled",
        {"ratio": Sci(4.0), "coefficient": 1.0, "share": 0.25, "k": 4, "unused": Phrase("token.not_divided")},
    )
    return seal(
        record(
            "gradient-accumulation/accumulate",
            "failed",
            checks,
            diagnosis,
            {"optimizer_steps": 3, "update_ratio": 4.0},
            "olá\n",
        ),
        output_kb=64,
    )


def test_a_record_holds_keys_and_values_and_survives_json():
    import json

    from contracts.verdict import render

    stored = json.loads(json.dumps(_not_scaled_record(), allow_nan=False))  # as the row keeps it
    assert stored["version"] == 2 and stored["diagnosis"]["id"] == "loss-not-scaled"
    assert "4.00" not in json.dumps(stored), "no rendered number is stored"
    english, portuguese = render(stored, "en"), render(stored, "pt-BR")
    assert english["version"] == 1
    assert english["diagnosis"]["title"] == "The loss is not divided by accum_steps"
    assert "Every accumulated gradient was 4.00×" in english["diagnosis"]["explanation"]
    assert "weight 1.00 instead of 0.25" in english["diagnosis"]["explanation"]
    assert portuguese["diagnosis"]["title"] == "A perda não é dividida por accum_steps"
    assert "Cada gradiente acumulado foi 4,00×" in portuguese["diagnosis"]["explanation"]
    assert [c["name"] for c in portuguese["checks"]] == ["Passos do otimizador", "Parâmetros após cada passo"]
    assert [c["status"] for c in english["checks"]] == ["passed", "failed"]


def test_a_record_is_sealed_as_strict_bounded_json():
    """What the worker stores: a learner's NaN loss becomes null (PostgreSQL refuses NaN in JSON)
    and a huge output or quoted message is cut to fit."""
    import json

    from contracts.verdict import MAX_BYTES, check_record, record, render, seal

    rec = record(
        "x/y",
        "error",
        [check_record("run", False, "error.exception", {"type": "ValueError", "message": "m" * 400_000})],
        metrics={"losses": [1.0, float("nan"), float("inf")], "update_ratio": float("-inf")},
        output="o" * 400_000,
    )
    sealed = seal(rec, output_kb=64)
    assert len(json.dumps(sealed, allow_nan=False)) <= MAX_BYTES  # raises on NaN or infinity
    assert sealed["metrics"] == {"losses": [1.0, None, None], "update_ratio": None}
    assert "ValueError: mmm" in render(sealed, "en")["checks"][0]["message"]


def test_switching_language_re_renders_an_old_verdict(client, app):
    """A verdict graded while the learner read English reads in Portuguese once they switch:
    on the page, in the attempts list and through the API."""
    page = finished(app, client, _not_scaled_record())
    assert page.select_one(".diagnosis h4").get_text() == "The loss is not divided by accum_steps"
    sub_id = page.select_one(".verdict-title")["id"].rsplit("-", 1)[1]
    again = html(client.get(f"/submissions/{sub_id}?lang=pt-BR"))
    assert again.select_one(".diagnosis h4").get_text() == "A perda não é dividida por accum_steps"
    assert "Cada gradiente acumulado foi 4,00×" in again.select_one(".diagnosis").get_text()
    assert "Parâmetros após cada passo" in again.select_one(".checks").get_text()
    attempts = html(client.get(f"{EXERCISE_URL}?lang=pt-BR")).select_one(".history-table")
    assert "A perda não é dividida por accum_steps" in attempts.get_text()
    api = client.get(f"/api/submissions/{sub_id}", headers={"Accept-Language": "pt-BR"}).json()
    assert api["verdict"]["diagnosis"]["title"] == "A perda não é dividida por accum_steps"
    assert api["verdict"]["checks"][1]["status"] == "failed"


def test_a_record_whose_keys_the_catalogue_lost_still_reads(client, app):
    """A row graded under an older catalogue (a check renamed, a placeholder dropped since):
    the page shows the stored key instead of failing."""
    from contracts.verdict import check_record, record

    stale = record(
        "gradient-accumulation/accumulate",
        "failed",
        [check_record("retired", False, "check.retired.failed", {"step": 1})],
        ("retired-mistake", {}),
    )
    page = finished(app, client, stale)
    assert page.select_one(".diagnosis h4").get_text() == "diagnosis.retired-mistake.title"
    assert "check.retired.failed" in page.select_one(".checks").get_text()
