"""Course and lesson pages, asserted on structure; the JSON listing; the 404 page."""

import shutil

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from contracts.languages import LANGS
from tests.conftest import LESSONS, html


def test_course_page_lists_every_lesson(client, course):
    page = html(client.get("/"))
    assert page.html["lang"] == "en"
    links = [a["href"] for a in page.select("main .course-card h3 a")]
    assert links == [f"/lessons/{lesson.slug}" for lesson in course.lessons]
    assert page.select_one("main h1").get_text(strip=True) == "Training on small GPUs"


@pytest.mark.parametrize("lang", LANGS)
def test_lesson_page_shows_cards_position_minutes_and_recap(client, course, lang):
    lesson = course.lesson("gradient-accumulation")
    text = lesson.text(lang)
    page = html(client.get(f"/lessons/{lesson.slug}", params={"lang": lang}))
    assert page.html["lang"] == lang
    assert page.select_one("h1").get_text(strip=True) == text.title
    cards = page.select("ol.cards > li.card")
    assert len(cards) == len(text.cards)
    assert [c.select_one("h2")["id"] for c in cards] == [f"{c.anchor}-h" for c in text.cards]
    eyebrow = page.select_one(".lesson-header .eyebrow").get_text(" ", strip=True)
    expected_position = {"en": "Lesson 2 of 6", "pt-BR": "Lição 2 de 6"}[lang]
    expected_minutes = {"en": f"{text.minutes} minutes", "pt-BR": f"{text.minutes} minutos"}[lang]
    assert expected_position in eyebrow and expected_minutes in eyebrow
    assert len(page.select(".recap li")) == len(text.recap_html)
    assert page.select("pre.highlight code span"), "code is highlighted"


def test_lesson_page_links_neighbours_and_all_lessons(client, course):
    page = html(client.get("/lessons/gradient-accumulation"))
    assert page.select_one('.pager a[rel="prev"]')["href"] == "/lessons/mixed-precision"
    assert page.select_one('.pager a[rel="next"]')["href"] == "/lessons/bottleneck"
    nav = page.select(".course-nav .lesson-list a")
    assert [a["href"] for a in nav] == [f"/lessons/{lesson.slug}" for lesson in course.lessons]
    assert [a.get("aria-current") for a in nav] == [None, "page", None, None, None, None]
    first = html(client.get("/lessons/mixed-precision"))
    assert first.select_one('.pager a[rel="prev"]') is None
    fourth = html(client.get("/lessons/gpu-memory"))
    assert fourth.select_one('.pager a[rel="next"]')["href"] == "/lessons/model-memory"
    fifth = html(client.get("/lessons/model-memory"))
    assert fifth.select_one('.pager a[rel="next"]')["href"] == "/lessons/long-sequences"
    last = html(client.get(f"/lessons/{course.lessons[-1].slug}"))
    assert last.select_one('.pager a[rel="next"]')["href"] == "/course/end"  # the course's end page


def test_pages_have_landmarks_labels_and_a_skip_link(client):
    page = html(client.get("/lessons/bottleneck"))
    assert page.select_one("a.skip-link")["href"] == "#main"
    assert page.select_one("main#main")
    assert page.select_one("body > header") and page.select_one("body > footer")
    for nav in page.select("nav"):
        assert nav.get("aria-label"), nav
    for radio in page.select("input[type=radio]"):
        assert radio.find_parent("label"), "every option is labelled"
    for fieldset in page.select("form.question fieldset"):
        assert fieldset.select_one("legend").get_text(strip=True)
    assert page.select_one('meta[name="viewport"]')


def test_every_asset_is_served_locally(client):
    page = html(client.get("/lessons/mixed-precision"))
    urls = [tag.get("src") or tag.get("href") for tag in page.select("script, link")]
    # the static files, and the app's own manifest (a route: its texts follow the language)
    assert urls and all(u.startswith("/static/") or u == "/manifest.webmanifest" for u in urls), urls
    for url in urls:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize(
    ("accept", "lang", "heading"),
    [
        ("pt-BR,pt;q=0.9", "pt-BR", "Página não encontrada"),
        ("en-US", "en", "Page not found"),
    ],
)
def test_unknown_lesson_is_a_404_page_in_the_visitors_language(client, accept, lang, heading):
    response = client.get("/lessons/no-such-lesson", headers={"Accept-Language": accept})
    assert response.status_code == 404
    page = html(response)
    assert page.html["lang"] == lang
    assert page.select_one("h1").get_text(strip=True) == heading
    assert len(page.select(".lesson-list a")) == 6, "the 404 page offers the lessons"


def test_api_lists_the_course_in_the_asked_language(client, course):
    for lang in LANGS:
        body = client.get("/api/lessons", params={"lang": lang}).json()
        assert body["lang"] == lang
        assert [item["slug"] for item in body["lessons"]] == [lesson.slug for lesson in course.lessons]
        core = body["lessons"][1]
        assert core["title"] == course.lesson("gradient-accumulation").text(lang).title
        assert core["url"].endswith("/lessons/gradient-accumulation")
        assert [e["id"] for e in core["exercises"]] == [
            ex.id for ex in course.lesson("gradient-accumulation").exercises
        ]
    assert client.get("/api/lessons", params={"lang": "xx"}).json()["lang"] == "pt-BR", "remembered"
    client.cookies.clear()
    assert client.get("/api/lessons", params={"lang": "xx"}).json()["lang"] == "en"


def test_openapi_documents_the_api(client):
    assert client.get("/docs").status_code == 200
    assert "/api/lessons" in client.get("/openapi.json").json()["paths"]


def test_unknown_api_path_is_json(client):
    response = client.get("/api/nothing")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "message": "Not Found", "detail": None}


def test_with_reload_lessons_an_edited_card_shows_at_the_next_request(tmp_path, sqlite_url):
    """Authoring mode: the parts rendered once per lesson are rendered again for a new edit."""
    lessons = tmp_path / "lessons"
    shutil.copytree(LESSONS, lessons)
    settings = Settings(database_url=sqlite_url, lessons_dir=lessons, reload_lessons=True, _env_file=None)
    path = lessons / "02-gradient-accumulation" / "lesson.en.md"
    with TestClient(create_app(settings)) as client:
        first = html(client.get("/lessons/gradient-accumulation")).select_one("ol.cards h2")
        assert first.get_text() == "Large batches need memory you don't have"
        path.write_text(
            path.read_text().replace(
                "## Large batches need memory you don't have", "## Big batches, small card"
            )
        )
        again = html(client.get("/lessons/gradient-accumulation")).select_one("ol.cards h2")
        assert again.get_text() == "Big batches, small card"
