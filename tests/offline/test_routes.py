"""Installable and offline (issue 34), server side: the service worker and manifest as browsers
need them, the page list for "Make available offline", and requests a page sends again after
being offline stored once (Idempotency-Key), drafts changed elsewhere not overwritten."""

import json

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.offline import release, routes
from app.offline.idempotency import code_hash
from app.quizzes.models import QuizAttempt
from app.submissions.models import Submission
from contracts.languages import LANGS
from tests.conftest import arm_csrf, html, sign_up

HTMX = {"HX-Request": "true"}
EXERCISE_URL = "/lessons/gradient-accumulation/exercises/accumulate"
DRAFT_URL = f"{EXERCISE_URL}/draft"
KEY = "0f3c2a9e-7d41-4b8e-9a6f-2c1d5e8b7a90"


def _count(app, model) -> int:
    with Session(app.state.sessionmaker.kw["bind"]) as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_the_service_worker_is_served_at_the_root_uncached_with_the_release_in_it(client, app):
    response = client.get("/sw.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.headers["cache-control"] == "no-cache"
    version = release.version(app.state.settings.lessons_dir)
    assert f'const VERSION = "{version}"' in response.text
    core = json.loads(response.text.split("const CORE = ", 1)[1].split("\n", 1)[0])
    assert "/static/css/app.css" in core and "/static/vendor/htmx-2.0.11.min.js" in core
    for url in core:
        assert client.get(url).status_code == 200, url


def test_a_lesson_edit_changes_the_version(tmp_path):
    import shutil

    lessons = tmp_path / "lessons"
    shutil.copytree(release.ROOT / "lessons", lessons)
    before = release.version(lessons)
    assert release.version(lessons) == before, "stable while nothing changes"
    page = next(lessons.glob("*/lesson.en.md"))
    page.write_text(page.read_text() + "\nA new line.\n")
    assert release.version(lessons) != before


def test_the_manifest_meets_the_install_criteria(client):
    response = client.get("/manifest.webmanifest")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/manifest+json")
    manifest = response.json()
    assert manifest["name"] and manifest["short_name"] and manifest["start_url"] == "/"
    assert manifest["display"] == "standalone"
    sizes = {icon["sizes"] for icon in manifest["icons"] if icon["purpose"] == "any"}
    assert {"192x192", "512x512"} <= sizes
    assert any(icon["purpose"] == "maskable" for icon in manifest["icons"])
    for icon in manifest["icons"]:
        image = client.get(icon["src"])
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
        width, height = (
            int.from_bytes(image.content[16:20], "big"),
            int.from_bytes(image.content[20:24], "big"),
        )
        assert f"{width}x{height}" == icon["sizes"], icon["src"]


def test_the_manifest_speaks_the_readers_language(client):
    en = client.get("/manifest.webmanifest", params={"lang": "en"}).json()
    pt = client.get("/manifest.webmanifest", params={"lang": "pt-BR"}).json()
    assert en["lang"] == "en" and pt["lang"] == "pt-BR"
    assert en["description"] != pt["description"]


def test_every_page_links_the_manifest_and_carries_the_offline_texts(client):
    for lang in LANGS:
        page = html(client.get("/", params={"lang": lang}))
        assert page.select_one('link[rel="manifest"]')["href"] == "/manifest.webmanifest"
        texts = page.select_one("[data-offline-texts]")
        assert texts["data-sw-url"] == "/sw.js"
        for name in ("answer-queued", "submission-queued", "updated", "conflict", "saving"):
            assert texts[f"data-{name}"], name
        assert page.select_one("[data-offline-bar]").has_attr("hidden")
    en = html(client.get("/", params={"lang": "en"})).select_one("[data-offline-texts]")["data-updated"]
    pt = html(client.get("/", params={"lang": "pt-BR"})).select_one("[data-offline-texts]")["data-updated"]
    assert en != pt


def test_the_course_pages_list_names_every_lesson_and_exercise(client, course):
    response = client.get("/offline/pages")
    assert response.headers["cache-control"] == "no-store"
    listed = response.json()
    for lesson in course.lessons:
        assert f"/lessons/{lesson.slug}" in listed["pages"]
        for exercise in lesson.exercises:
            assert f"/lessons/{lesson.slug}/exercises/{exercise.slug}" in listed["pages"]
    assert "/" in listed["pages"] and "/offline" in listed["pages"]
    for url in listed["pages"][:3] + listed["assets"]:
        assert client.get(url).status_code == 200, url


def test_the_offline_page_is_in_both_languages(client):
    en = html(client.get("/offline", params={"lang": "en"}))
    pt = html(client.get("/offline", params={"lang": "pt-BR"}))
    assert en.h1.get_text() == "You are offline"
    assert pt.h1.get_text() == "Você está sem conexão"


def test_the_offline_page_is_no_ones(client):
    """Kept once and shown to whoever uses the browser later (issue 43, class 5): it names no
    account, offers no sign-in, and says no owner (the worker would drop every kept page for it)."""
    for signed_in in (False, True):
        if signed_in:
            sign_up(client, "offline-page@example.com")
        for lang in LANGS:
            page = html(client.get("/offline", params={"lang": lang}))
            assert page.select_one("[data-offline-texts]")["data-owner"] == ""
            assert not page.select(".account-nav"), (signed_in, lang)
            assert "offline-page@example.com" not in page.get_text()
        # every other page still says whose it is, and names the account
        other = html(client.get("/"))
        assert other.select_one("[data-offline-texts]")["data-owner"][0] == ("u" if signed_in else "v")
        assert bool(other.select(".account-email")) == signed_in


def test_the_worker_keeps_a_bounded_number_of_pages_and_the_course_fits(client):
    """Issue 47: the page cache has a bound, written into the worker, and "Make available
    offline" saves the whole course within a quarter of it (browsing keeps room for the rest)."""
    worker = client.get("/sw.js").text
    assert f"const MAX_PAGES = {routes.MAX_PAGES}\n" in worker
    assert "MAX_PAGES" in worker.split("\n", 4)[4], "the worker uses it"
    assert 4 * len(client.get("/offline/pages").json()["pages"]) <= routes.MAX_PAGES


def test_the_session_says_whose_pages_and_the_token_of_now(client):
    before = client.get("/offline/session").json()
    assert before["owner"].startswith("v") and before["csrf_token"] == client.headers["X-CSRF-Token"]
    sign_up(client, "offline@example.com")
    after = client.get("/offline/session").json()
    assert after["owner"].startswith("u") and after["csrf_token"] != before["csrf_token"]


def test_an_answer_sent_again_with_its_key_is_stored_once(db_client, db_app, course):
    question = course.lesson("gradient-accumulation").questions[0]
    right = next(o for o in question.options if o.correct)
    wrong = next(o for o in question.options if not o.correct)
    url = f"/lessons/gradient-accumulation/quiz/{question.id}"
    first = db_client.post(url, data={"option": right.id}, headers={**HTMX, "Idempotency-Key": KEY})
    again = db_client.post(url, data={"option": right.id}, headers={**HTMX, "Idempotency-Key": KEY})
    assert first.status_code == again.status_code == 200
    assert "is-right" in again.text
    assert _count(db_app, QuizAttempt) == 1
    # a different answer under the same key is the first one still: the key names one answer
    odd = db_client.post(url, data={"option": wrong.id}, headers={**HTMX, "Idempotency-Key": KEY})
    assert "is-right" in odd.text and _count(db_app, QuizAttempt) == 1
    db_client.post(url, data={"option": wrong.id}, headers=HTMX)  # no key: an ordinary answer
    assert _count(db_app, QuizAttempt) == 2


def test_a_key_is_the_learners_own(app):
    with TestClient(app) as one, TestClient(app) as other:
        arm_csrf(one)
        arm_csrf(other)
        question = app.state.course.lesson("gradient-accumulation").questions[0]
        url = f"/lessons/gradient-accumulation/quiz/{question.id}"
        option = question.options[0].id
        assert (
            one.post(url, data={"option": option}, headers={**HTMX, "Idempotency-Key": KEY}).status_code
            == 200
        )
        # another learner's request with the same key is not answered with the first one's row
        response = other.post(url, data={"option": option}, headers={**HTMX, "Idempotency-Key": KEY})
        assert response.status_code == 200
        assert _count(app, QuizAttempt) == 2, "an ordinary answer of its own"


def test_code_submitted_offline_and_sent_again_is_queued_once(db_client, db_app):
    headers = {**HTMX, "Idempotency-Key": KEY}
    first = db_client.post(f"{EXERCISE_URL}/submissions", data={"code": "x = 1"}, headers=headers)
    again = db_client.post(f"{EXERCISE_URL}/submissions", data={"code": "x = 1"}, headers=headers)
    assert first.status_code == again.status_code == 200, again.text
    assert 'id="submission-status"' in again.text
    assert _count(db_app, Submission) == 1
    other = db_client.post(f"{EXERCISE_URL}/submissions", data={"code": "x = 2"}, headers=HTMX)
    assert other.status_code == 429, "still one active submission per learner"


def test_a_malformed_key_is_no_key(client, app):
    question = app.state.course.lesson("gradient-accumulation").questions[0]
    url = f"/lessons/gradient-accumulation/quiz/{question.id}"
    for _ in range(2):
        client.post(
            url, data={"option": question.options[0].id}, headers={**HTMX, "Idempotency-Key": "short"}
        )
    assert _count(app, QuizAttempt) == 2


def test_a_draft_changed_elsewhere_is_not_overwritten(db_client):
    saved = db_client.put(DRAFT_URL, json={"code": "start = 0", "base": ""})
    assert saved.status_code == 200
    base = code_hash("start = 0")
    # another device saves on top of it
    assert db_client.put(DRAFT_URL, json={"code": "theirs = 1", "base": base}).status_code == 200
    # this one, offline meanwhile, comes back with edits on the old copy: refused, with theirs
    refused = db_client.put(DRAFT_URL, json={"code": "mine = 2", "base": base})
    assert refused.status_code == 409
    assert refused.json() == {
        "code": "theirs = 1",
        "updated_at": refused.json()["updated_at"],
        "hash": code_hash("theirs = 1"),
    }
    assert db_client.get(DRAFT_URL).json()["code"] == "theirs = 1"
    # having kept both, the page sends the learner's on top of the copy it now knows
    assert (
        db_client.put(DRAFT_URL, json={"code": "mine = 2", "base": code_hash("theirs = 1")}).status_code
        == 200
    )
    assert db_client.get(DRAFT_URL).json()["code"] == "mine = 2"
    # without a base, as before: the last save wins
    assert db_client.put(DRAFT_URL, json={"code": "plain = 3"}).status_code == 200


def test_the_draft_hash_matches_the_pages(client):
    # the values static/js/offline.js's draftHash gives (FNV-1a over UTF-16 code units)
    assert code_hash("") == "811c9dc5"
    assert code_hash("a") == "e40c292c"
    assert code_hash("é😀") == code_hash("é😀") and len(code_hash("é😀")) == 8
