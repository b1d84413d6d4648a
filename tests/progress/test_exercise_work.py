"""Exercise work counts: in the bars (reading, the quick check and each exercise weigh the same),
in "continue where you left off", and as ✓ marks in the lesson's practice list; "Go further"
cards are folded after the quick check and do not count."""

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import update

from app.submissions.models import Submission
from tests.conftest import html
from tests.progress.test_routes import HTMX, _pass_quiz, _progress, _reach
from tests.submissions.test_routes import API_URL, grade_all

LESSON = "gradient-accumulation"


def _fail_all(app) -> None:
    with app.state.sessionmaker.begin() as session:
        session.execute(update(Submission).values(status="failed", active_owner=None))


def test_a_first_try_at_an_exercise_is_where_to_continue(client, app):
    assert client.post(API_URL, json={"code": "x"}).status_code == 202
    _fail_all(app)
    page = html(client.get("/"))
    assert page.select_one(".resume a")["href"] == f"/lessons/{LESSON}/exercises/accumulate"
    assert "Start the first lesson" not in page.get_text()
    assert _progress(client)["resume"]["url"].endswith(f"/lessons/{LESSON}/exercises/accumulate")


def test_reading_and_the_quick_check_without_the_exercise_is_two_thirds(client, app, course):
    lesson = course.lesson(LESSON)
    _reach(client, LESSON, *range(len(lesson.text("en").cards)))  # "Go further" ones too
    _pass_quiz(client, lesson)
    bar = html(client.get(f"/lessons/{LESSON}")).select_one("#lesson-progress progress")
    parts = 2 + len(lesson.exercises)
    assert (float(bar["value"]), bar["max"]) == (2, str(parts))
    assert "%" in bar.get_text()
    assert client.post(API_URL, json={"code": "x"}).status_code == 202
    grade_all(app)  # passes
    bar = html(client.get(f"/lessons/{LESSON}")).select_one("#lesson-progress progress")
    assert float(bar["value"]) == 3
    # the pass is the latest activity; with every part of this lesson done, go on to the next one
    page = html(client.get("/"))
    nxt = course.lessons[[lsn.slug for lsn in course.lessons].index(LESSON) + 1]
    if len(lesson.exercises) == 1:
        assert page.select_one(".resume a")["href"].startswith(f"/lessons/{nxt.slug}")


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_a_passed_exercise_is_ticked_in_the_lessons_practice_list(client, app, course, lang):
    lesson = course.lesson(LESSON)
    items = html(client.get(f"/lessons/{LESSON}", params={"lang": lang})).select(".practice-list li")
    assert len(items) == len(lesson.exercises) and not any(li.select("svg") for li in items)
    client.post(API_URL, json={"code": "x"})
    grade_all(app)
    items = html(client.get(f"/lessons/{LESSON}", params={"lang": lang})).select(".practice-list li")
    assert items[0]["class"] == ["is-passed"] and items[0].select_one(".practice-mark svg")
    assert not any(li.select("svg") for li in items[1:])
    with client.__class__(app) as other:  # rendered per visitor: another one sees no tick
        page = html(other.get(f"/lessons/{LESSON}", params={"lang": lang}))
        assert not page.select(".practice-list li.is-passed")


def test_go_further_cards_come_folded_after_the_quick_check(client, course):
    lesson = course.lesson(LESSON)
    text = lesson.text("en")
    assert text.further_cards, "lesson 2 marks its 'Go further' cards with {.further}"
    page = html(client.get(f"/lessons/{LESSON}"))
    article = page.select_one("article.lesson")
    parts = article.find_all(["ol", "section", "details"], recursive=False)
    order = [el.get("id") or el.name for el in parts]
    assert order.index("quiz") < order.index("further"), order
    fold = article.select_one("details#further")
    assert not fold.has_attr("open")
    assert [li["id"] for li in fold.select("li.card")] == [c.anchor for c in text.further_cards]
    core = len(text.core_cards)
    assert fold.select_one("li.card")["hx-post"] == f"/lessons/{LESSON}/cards/{core}"
    assert f"{len(text.core_cards)} cards" in page.select_one(".lesson-header .eyebrow").get_text()
    # reading a "Go further" card is welcome but is not progress
    client.post(f"/lessons/{LESSON}/cards/{core}", headers=HTMX)
    assert _progress(client)["lessons"][LESSON]["cards_read"] == 0


def test_quiz_feedback_boxes_stay_empty_until_answered_and_say_right_once(client, course):
    lesson = course.lesson(LESSON)
    page = html(client.get(f"/lessons/{LESSON}"))
    for box in page.select(".feedback"):
        assert box["class"] == ["feedback"] and not box.get_text(strip=True)
    question = lesson.questions[0]
    answer = html(
        client.post(
            f"/lessons/{LESSON}/quiz/{question.id}", data={"option": question.correct_option.id}, headers=HTMX
        )
    )
    assert answer.select_one(".feedback").get_text().count("Right.") == 1


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_the_end_of_the_course_says_what_each_lesson_taught_and_how_this_learner_did(
    client, app, course, lang
):
    assert client.post(API_URL, json={"code": "x"}).status_code == 202
    _fail_all(app)
    assert client.post(API_URL, json={"code": "x"}).status_code == 202
    grade_all(app)  # passes, at the second attempt
    remainder = "/api/lessons/gradient-accumulation/exercises/remainder/submissions"
    assert client.post(remainder, json={"code": "x"}).status_code == 202
    with app.state.sessionmaker.begin() as session:
        session.execute(
            update(Submission).where(Submission.status == "queued").values(status="failed", active_owner=None)
        )
    page = html(client.get("/course/end", params={"lang": lang}))
    lessons = page.select(".end-lesson")
    assert len(lessons) == len(course.lessons)
    said = {
        "en": (
            "The end of the course",
            "passed on attempt 2",
            "not passed yet, after 1 attempt",
            "not tried yet",
        ),
        "pt-BR": (
            "O fim do curso",
            "concluído na tentativa 2",
            "ainda não concluído, depois de 1 tentativa",
            "ainda não tentado",
        ),
    }[lang]
    assert page.select_one("h1").get_text() == said[0], "not finished: not congratulated"
    lesson = course.lesson(LESSON)
    mine = lessons[lesson.number - 1]
    assert len(mine.select("h3 + ul:not(.end-results) li")) == len(lesson.text(lang).recap_html)
    results = [li.get_text(" ", strip=True) for li in mine.select(".end-results li")]
    assert said[1] in results[1] and said[2] in results[2] and said[3] in results[3]
    passed = mine.select(".end-results li")[1].select("a")[1]["href"]
    assert html(client.get(passed)).select_one(".verdict-card.verdict-passed"), "links to that verdict"
    assert page.select(".end-next a[href^='https://pytorch.org/']"), "where to go next"
    advice = [li.get_text() for li in page.select(".end-next li")]
    said_next = [BeautifulSoup(item[lang], "html.parser").get_text() for item in course.closing.next]
    assert all(item in advice for item in said_next), "lessons/course.yaml's advice"
    assert page.select_one(".hero a.button"), "the way back to what is left"
