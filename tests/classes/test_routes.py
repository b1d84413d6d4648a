"""The classes' pages: starting a class, the join page (what the teachers will see, said before
joining; an account asked for first), the class page and its live wait, the CSV, a learner's
submissions, leaving and removing. Everyone who does not teach the class gets 404."""

import csv
import io
import time

from fastapi.testclient import TestClient

from app.accounts.models import User
from app.classes.models import Classroom
from app.submissions.models import Status
from tests.classes.conftest import EXERCISE, MISTAKE, answered, graded
from tests.conftest import arm_csrf, html, sign_up


def _start_class(client: TestClient, name: str = "DL 2026") -> Classroom:
    response = client.post("/classes", data={"name": name, "course": "MO434"}, follow_redirects=False)
    assert response.status_code == 303, response.text
    class_id = int(response.headers["location"].rsplit("/", 1)[1])
    with client.app.state.sessionmaker() as s:  # type: ignore[attr-defined]
        classroom = s.get(Classroom, class_id)
        assert classroom is not None
        return classroom


def _record(app, email: str, status: Status, mistake: str | None = None, lang: str = "en") -> None:
    with app.state.sessionmaker.begin() as s:
        graded(s, s.query(User).filter_by(email=email).one(), status, mistake, lang=lang)


def _join(client: TestClient, code: str, name: str) -> str:
    response = client.post(f"/classes/join/{code}", data={"name": name}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return response.headers["location"]


def test_a_teacher_sees_the_class_work_and_nobody_else_does(db_app):
    with (
        TestClient(db_app) as teacher,
        TestClient(db_app) as ana,
        TestClient(db_app) as bia,
        TestClient(db_app) as outsider,
    ):
        for client, email in ((teacher, "t"), (ana, "ana"), (bia, "bia"), (outsider, "out")):
            arm_csrf(client)
            sign_up(client, f"{email}@example.com")
        classroom = _start_class(teacher)
        page = html(teacher.get(f"/classes/{classroom.id}"))
        assert page.h1.get_text() == "DL 2026"
        assert page.find(id="join-url")["value"].endswith(f"/classes/join/{classroom.join_code}")
        assert "No learners yet" in page.get_text()

        join_page = html(ana.get(f"/classes/join/{classroom.join_code}")).get_text(" ", strip=True)
        assert "What the teachers will see" in join_page and "Every piece of code submitted" in join_page
        joined = html(ana.get(_join(ana, classroom.join_code, "Ana")))
        assert (
            joined.select_one(".notice").get_text()
            == "You joined DL 2026. You can leave it here at any time."
        )
        _join(bia, classroom.join_code, "Bia")
        assert (
            "You are already in this class."
            in html(ana.get(f"/classes/join/{classroom.join_code}")).get_text()
        )
        mine = html(ana.get("/classes"))
        assert mine.find("button", string="Leave DL 2026") is not None
        assert "you appear as Ana" in mine.get_text()
        teaching = html(teacher.get("/classes"))
        assert teaching.find("a", href=f"/classes/{classroom.id}").get_text() == "DL 2026"
        _record(db_app, "ana@example.com", Status.FAILED, MISTAKE, lang="pt-BR")
        _record(db_app, "bia@example.com", Status.FAILED, MISTAKE)
        _record(db_app, "bia@example.com", Status.PASSED)
        with db_app.state.sessionmaker.begin() as s:
            for email in ("ana@example.com", "bia@example.com"):
                learner = s.query(User).filter_by(email=email).one()
                answered(s, learner, "gradient-accumulation", "when-to-step", "after-each", False)

        page = html(teacher.get(f"/classes/{classroom.id}"))
        rows = {row.th.get_text(strip=True): row for row in page.select(".class-grid tbody tr")}
        assert list(rows) == ["Ana", "Bia"]
        assert [td.get_text() for td in rows["Bia"].select("td.passed")] == ["passed2"]  # words, attempts
        assert [td.get_text() for td in rows["Ana"].select("td.tried")] == ["tried1"]
        assert len(rows["Ana"].select("td.not-started")) == len(db_app.state.course.exercises) - 1
        mistake = page.select_one(f'[data-exercise="{EXERCISE}"] [data-mistake="{MISTAKE}"]')
        assert mistake.select_one(".mistake-count").get_text() == "2"
        assert mistake.select_one(".mistake-title").get_text(strip=True)  # named, not an id
        assert mistake.select_one(".mistake-title").get_text() != MISTAKE
        assert mistake.blockquote["lang"] in ("en", "pt-BR") and mistake.blockquote.get_text(strip=True)
        assert "1 of 2 passed · 2 tried" in page.select_one(f'[data-exercise="{EXERCISE}"]').get_text()
        wrong = page.select_one('[data-question="gradient-accumulation/when-to-step"]')
        assert wrong.select_one(".mistake-count").get_text() == "2"  # two learners chose it
        assert "After every micro-batch" in wrong.get_text()  # the option's own words

        exported = teacher.get(f"/classes/{classroom.id}/export.csv")
        assert exported.headers["content-type"].startswith("text/csv")
        table = list(csv.reader(io.StringIO(exported.text)))
        column = table[0].index(f"{EXERCISE} (status)")
        assert [(r[0], r[column], r[column + 1]) for r in table[1:]] == [
            ("Ana", "tried", "1"),
            ("Bia", "passed", "2"),
        ]

        ana_id = int(rows["Ana"]["data-learner"])
        learner = html(teacher.get(f"/classes/{classroom.id}/learners/{ana_id}"))
        assert f"# ana@example.com: failed {MISTAKE}" in learner.get_text()  # the code, read-only

        urls = [
            f"/classes/{classroom.id}",
            f"/classes/{classroom.id}/export.csv",
            f"/classes/{classroom.id}/learners/{ana_id}",
            f"/api/classes/{classroom.id}",
        ]
        for who in (outsider, ana):
            for url in urls:
                assert who.get(url).status_code == 404, url
            remove = who.post(f"/classes/{classroom.id}/learners/{ana_id}/remove", follow_redirects=False)
            assert remove.status_code == 404
            assert who.post(f"/classes/{classroom.id}/codes", follow_redirects=False).status_code == 404

        assert ana.post(f"/classes/{classroom.id}/leave", follow_redirects=False).status_code == 303
        page = html(teacher.get(f"/classes/{classroom.id}"))
        assert [row.th.get_text(strip=True) for row in page.select(".class-grid tbody tr")] == ["Bia"]
        assert teacher.get(f"/classes/{classroom.id}/learners/{ana_id}").status_code == 404
        mistake = page.select_one(f'[data-exercise="{EXERCISE}"] [data-mistake="{MISTAKE}"] .mistake-count')
        assert mistake.get_text() == "1"

        bia_id = int(page.select_one(".class-grid tbody tr")["data-learner"])
        teacher.post(f"/classes/{classroom.id}/learners/{bia_id}/remove")
        assert "No learners yet" in html(teacher.get(f"/classes/{classroom.id}")).get_text()


def test_the_join_page_asks_a_visitor_for_an_account_first_and_says_what_is_shared(client):
    arm_csrf(client)
    sign_up(client, "t@example.com")
    classroom = _start_class(client)
    client.post("/sign-out")
    with TestClient(client.app) as visitor:
        page = html(visitor.get(f"/classes/join/{classroom.join_code.lower()}"))
        text = page.get_text(" ", strip=True)
        assert "create an account first" in text and "Quick-check answers" in text
        sign_up_link = page.find("a", string="Create an account")
        assert sign_up_link["href"].startswith("/sign-up?next=%2Fclasses%2Fjoin%2F")
        assert page.find("form", action=f"/classes/join/{classroom.join_code.lower()}") is None
        assert visitor.get("/classes/join/NOSUCHCODE").status_code == 404
        refused = visitor.post(f"/classes/join/{classroom.join_code}", follow_redirects=False)
        assert refused.status_code in (303, 403)  # to sign in (or the CSRF check first): never joined


def test_the_pages_are_in_portuguese_too(client):
    arm_csrf(client)
    sign_up(client, "t@example.com")
    classroom = _start_class(client)
    page = html(client.get(f"/classes/{classroom.id}?lang=pt-BR")).get_text(" ", strip=True)
    assert "Nenhum aluno ainda" in page and "Verificações rápidas: respostas erradas" in page
    join = html(client.get(f"/classes/join/{classroom.join_code}?lang=pt-BR")).get_text(" ", strip=True)
    assert "Você já está nesta turma." in join


def test_renewed_links_end_the_old_ones(client):
    arm_csrf(client)
    sign_up(client, "t@example.com")
    classroom = _start_class(client)
    assert client.post(f"/classes/{classroom.id}/codes", follow_redirects=False).status_code == 303
    assert client.get(f"/classes/join/{classroom.join_code}").status_code == 404
    assert client.get(f"/classes/join/{classroom.teacher_code}").status_code == 404


def test_the_live_wait_answers_when_the_class_changes_and_only_with_the_pages_key(client, app):
    arm_csrf(client)
    sign_up(client, "t@example.com")
    classroom = _start_class(client)
    section = html(client.get(f"/classes/{classroom.id}")).find(id="class-report")
    wait_url = section["data-wait-url"]
    assert client.get(wait_url.replace("key=", "key=0")).status_code == 404
    stale = wait_url.replace("seen=", "seen=0")  # what the page saw is no longer so
    started = time.monotonic()
    assert client.get(stale).status_code == 204
    assert time.monotonic() - started < 15  # at once, not after the 20 s a quiet class waits
    fragment = client.get(f"/classes/{classroom.id}", headers={"HX-Request": "true"})
    assert html(fragment).find(id="class-report")["hx-trigger"] == "changed"


def test_last_activity_reads_as_the_submission_pages_say_it():
    from datetime import timedelta

    from app.classes.routes import ago
    from app.db import utcnow
    from app.submissions.present import when

    now = utcnow()
    for back in (timedelta(seconds=20), timedelta(minutes=3, seconds=20), timedelta(hours=2, minutes=10)):
        assert ago(now - back, now) == when(now - back, now)
    assert ago(now - timedelta(minutes=3, seconds=20), now) == "3 minutes ago"


def test_a_second_teacher_joins_with_the_teachers_link_and_may_stop_teaching(db_app):
    with TestClient(db_app) as first, TestClient(db_app) as second:
        for client, email in ((first, "t1"), (second, "t2")):
            arm_csrf(client)
            sign_up(client, f"{email}@example.com")
        classroom = _start_class(first)
        alone = html(first.get(f"/classes/{classroom.id}"))
        assert alone.find("button", string=lambda t: t and "Stop teaching" in t) is None  # the only one
        assert first.post(f"/classes/{classroom.id}/leave").status_code == 409
        assert _join(second, classroom.teacher_code, "Second") == f"http://testserver/classes/{classroom.id}"
        page = html(second.get(f"/classes/{classroom.id}"))
        assert "Teachers: t1, Second." in page.get_text(" ", strip=True)
        assert page.find("button", string=lambda t: t and "Stop teaching" in t) is not None
        assert second.post(f"/classes/{classroom.id}/leave", follow_redirects=False).status_code == 303
        assert second.get(f"/classes/{classroom.id}").status_code == 404
        assert first.get(f"/classes/{classroom.id}").status_code == 200
