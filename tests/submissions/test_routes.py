"""Submissions through pages and the API: queued as jobs, polled to a verdict, owner-only."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from contracts.languages import LANGS
from tests.conftest import arm_csrf, html
from tests.worker.test_queue import fake_verdict
from worker.runner import Worker

EXERCISE_URL = "/lessons/gradient-accumulation/exercises/accumulate"
API_URL = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"
HTMX = {"HX-Request": "true"}


def grade_all(app) -> None:
    """What the worker does: every queued job graded (by a stand-in grader)."""
    with Worker(app.state.settings, grade=fake_verdict, course=app.state.course) as worker:
        while worker.run_once():
            pass


@pytest.mark.parametrize("lang", LANGS)
def test_exercise_page_offers_the_prompt_the_starter_and_an_editor(client, course, lang):
    exercise = course.exercise("gradient-accumulation/accumulate")
    page = html(client.get(EXERCISE_URL, params={"lang": lang}))
    assert page.select_one("h1").get_text(strip=True) == exercise.title[lang]
    textarea = page.select_one("textarea#code")
    assert textarea.get_text() == exercise.starter
    assert textarea.has_attr("data-code-editor") and textarea["data-draft-url"] == f"{EXERCISE_URL}/draft"
    phrases = json.loads(textarea["data-phrases"])
    assert (phrases == {}) if lang == "en" else (phrases["Find"] == "Procurar")
    assert page.select_one('label[for="code"]')
    assert page.select_one("script[type=module]")["src"] == "/static/js/editor.js"
    form = page.select_one("form.code-form")
    assert form["method"] == "post" and form["action"] == f"{EXERCISE_URL}/submissions"
    assert [b["value"] for b in form.select("button[name=mode]")] == ["submit", "run"]
    assert "Ctrl+Enter" in form.select_one("button[value=submit]").get_text()
    assert "Esc" in page.select_one("#editor-help").get_text()


@pytest.mark.parametrize("lang", LANGS)
def test_hints_open_one_at_a_time(client, course, lang):
    exercise = course.exercise("gradient-accumulation/accumulate")
    word = {"en": "Hint {} of 3", "pt-BR": "Dica {} de 3"}[lang]
    hints = html(client.get(EXERCISE_URL, params={"lang": lang})).select_one("#hints")
    assert not hints.select(".hint-item"), "no hint is on the page before it is asked for"
    for shown in (1, 2, 3):
        link = hints.select_one("a.hint-next")
        assert link["hx-get"].endswith(f"hints?shown={shown}")
        hints = html(client.get(link["hx-get"], headers=HTMX)).select_one("#hints")
        assert [h.select_one("h3").get_text() for h in hints.select(".hint-item")] == [
            word.format(n) for n in range(1, shown + 1)
        ]
        assert hints.select(".hint-item p")[-1].get_text() == exercise.hints[shown - 1][lang].replace("`", "")
    assert not hints.select("a.hint-next"), "all three are open"


def test_hints_without_javascript_go_through_the_exercise_page(client):
    response = client.get(f"{EXERCISE_URL}/hints?shown=2", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].endswith(f"{EXERCISE_URL}?hints=2#hints")
    page = html(client.get(response.headers["location"]))
    assert len(page.select("#hints .hint-item")) == 2


def test_the_lesson_page_links_its_exercises(client, course):
    page = html(client.get("/lessons/gradient-accumulation"))
    links = [a["href"] for a in page.select(".exercises a")]
    assert links == [
        f"/lessons/gradient-accumulation/exercises/{ex.slug}"
        for ex in course.lesson("gradient-accumulation").exercises
    ]


def test_htmx_submit_returns_a_status_that_polls_until_the_verdict(client, app):
    response = client.post(
        f"{EXERCISE_URL}/submissions", data={"code": "x = 1", "mode": "submit"}, headers=HTMX
    )
    assert response.status_code == 200
    fragment = html(response)
    status = fragment.select_one("#submission-status")
    assert status["hx-trigger"] == "changed" and status["hx-swap"] == "outerHTML"
    assert status["data-wait-url"].startswith("/live/submissions/"), "static/js/status.js waits on it"
    assert "you are next" in status.select_one(".status-line").get_text()
    assert "sent" in fragment.select_one("#status-announcer[hx-swap-oob=innerHTML]").get_text()
    poll_url = status["hx-get"]
    again = html(client.get(poll_url, headers=HTMX))
    assert not again.select("#status-announcer"), "a poll that changes nothing says nothing"
    grade_all(app)
    final_page = html(
        client.get(poll_url, headers={**HTMX, "HX-Current-URL": f"http://testserver{EXERCISE_URL}"})
    )
    final = final_page.select_one("#submission-status")
    assert final.get("hx-trigger") is None and final.get("data-wait-url") is None, "a final one waits no more"
    assert "state-passed" in final["class"]
    assert final.select_one(".output pre").get_text() == "x = 1"
    assert "Passed" in final_page.select_one("#status-announcer").get_text()
    assert final_page.select_one("#history[hx-swap-oob]"), "the history is refreshed with the outcome"


def test_a_wait_ends_when_the_status_changes_and_only_with_the_pages_key(db_client, db_app, monkeypatch):
    """The page's long request (no polling): unanswered while nothing changes, answered at once when
    the worker finishes, on SQLite (the watcher reads the row) and PostgreSQL (NOTIFY)."""
    from app.submissions import routes

    response = db_client.post(f"{EXERCISE_URL}/submissions", data={"code": "x = 1"}, headers=HTMX)
    status = html(response).select_one("#submission-status")
    wait_url, poll_url = status["data-wait-url"], status["hx-get"]
    monkeypatch.setattr(routes, "WAIT_SECONDS", 0.3)
    assert db_client.get(wait_url).status_code == 204, "unchanged after WAIT_SECONDS: answered anyway"
    forged = wait_url.replace("/live/submissions/", "/live/submissions/9")
    assert db_client.get(forged).status_code == 404, "another submission's key does not fit"
    monkeypatch.setattr(routes, "WAIT_SECONDS", 60)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(db_client.get, wait_url)
        time.sleep(0.5)
        assert not waiting.done(), f"nothing changed yet: {waiting.done() and waiting.result()}"
        grade_all(db_app)
        started = time.monotonic()
        assert waiting.result(timeout=30).status_code == 204
    assert time.monotonic() - started < 30, "answered by the change, not by the timeout"
    status = html(db_client.get(poll_url, headers=HTMX))
    assert "state-passed" in status.select_one("#submission-status")["class"]


def test_without_javascript_the_submit_redirects_to_the_submission_page(client, app):
    response = client.post(f"{EXERCISE_URL}/submissions", data={"code": "y = 2"}, follow_redirects=False)
    assert response.status_code == 303
    page = html(client.get(response.headers["location"]))
    assert page.select_one("noscript meta[http-equiv=refresh]"), "refreshes itself while queued"
    assert page.select_one(".submitted-code pre").get_text() == "y = 2"
    grade_all(app)
    page = html(client.get(response.headers["location"]))
    assert not page.select("noscript meta[http-equiv=refresh]")
    # the exercise page now shows the latest code and the history
    exercise = html(client.get(EXERCISE_URL))
    assert exercise.select_one("textarea#code").get_text() == "y = 2"
    assert len(exercise.select(".history tbody tr")) == 1


def test_a_second_submission_while_one_is_queued_is_429(client):
    assert client.post(API_URL, json={"code": "a"}).status_code == 202
    response = client.post(API_URL, json={"code": "b"})
    assert response.status_code == 429
    assert response.json()["code"] == "already_active"
    assert "already" in response.json()["message"]
    page = client.post(f"{EXERCISE_URL}/submissions", data={"code": "c"}, headers=HTMX)
    assert page.status_code == 429
    assert html(page).select_one(".status-line.is-error")


def test_api_submit_poll_and_verdict(client, app):
    created = client.post(API_URL, json={"code": "print('hi')"})
    assert created.status_code == 202
    body = created.json()
    assert body["status"] == "queued"
    polled = client.get(f"/api/submissions/{body['id']}").json()
    assert polled == {
        "id": body["id"],
        "exercise": "gradient-accumulation/accumulate",
        "mode": "submit",
        "status": "queued",
        "queue_position": 1,
        "verdict": None,
    }
    grade_all(app)
    polled = client.get(f"/api/submissions/{body['id']}").json()
    assert polled["status"] == "passed" and polled["queue_position"] is None
    assert polled["verdict"]["exercise"] == "gradient-accumulation/accumulate"


def test_another_learner_cannot_see_my_submission(client, app):
    sub_id = client.post(API_URL, json={"code": "secret = 42"}).json()["id"]
    with TestClient(app) as stranger:
        arm_csrf(stranger)
        assert stranger.get(f"/api/submissions/{sub_id}").status_code == 404
        assert stranger.get(f"/submissions/{sub_id}").status_code == 404
        assert stranger.get(f"/submissions/{sub_id}", headers=HTMX).status_code == 404
        assert "secret = 42" not in stranger.get(EXERCISE_URL).text


@pytest.mark.parametrize(
    ("url", "kwargs", "status"),
    [
        ("/lessons/gradient-accumulation/exercises/nope", {}, 404),
        ("/lessons/nope/exercises/accumulate", {}, 404),
    ],
)
def test_unknown_exercise_is_404(client, url, kwargs, status):
    assert client.get(url, **kwargs).status_code == status
    assert (
        client.post(
            url.replace("/lessons/", "/api/lessons/") + "/submissions", json={"code": "x"}
        ).status_code
        == status
    )


def test_malformed_submissions_are_clear_4xx(client):
    assert client.post(API_URL, json={}).status_code == 422
    assert client.post(API_URL, json={"code": "x", "mode": "fly"}).status_code == 422
    assert (
        client.post(API_URL, content=b"{not json", headers={"Content-Type": "application/json"}).status_code
        == 422
    )
    assert client.post(f"{EXERCISE_URL}/submissions", data={}).status_code == 422
    assert client.post(API_URL, json={"code": "x" * (300 * 1024)}).status_code == 413
