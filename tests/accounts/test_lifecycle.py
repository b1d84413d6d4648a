"""A way back in and a way out: the one-time password reset link (by e-mail over SMTP, or from
`treino accounts reset-password EMAIL`), the export of one's own data, and deleting the account."""

import json
import re
import socket
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from app.accounts import lifecycle
from app.accounts.mail import SmtpMailer
from app.accounts.models import AuthSession, User
from app.config import Settings, get_settings
from app.db import utcnow
from app.models import CardReached, Draft, QuizAttempt, Submission
from tests.conftest import LESSONS, PASSWORD, arm_csrf, html, sign_in, sign_up

NEW_PASSWORD = "violet kettle harbour moss"
API_URL = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"


class Outbox:
    """Stands in for the SMTP sender: keeps what would have been mailed."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def send(self, to: str, subject: str, body: str) -> None:
        self.sent.append((to, subject, body))

    def link(self) -> str:
        url = re.search(r"http\S+", self.sent[-1][2])[0]
        parts = urlsplit(url)
        return f"{parts.path}?{parts.query}"


@pytest.fixture
def outbox(app) -> Outbox:
    app.state.mailer = box = Outbox()
    return box


def _ask(client: TestClient, email: str):
    return client.post("/forgot-password", data={"email": email})


def test_a_reset_link_by_mail_works_once_and_signs_every_device_out(client, app, outbox):
    sign_up(client, "ana@example.com")
    with TestClient(app) as laptop:  # another device, signed in
        arm_csrf(laptop)
        sign_in(laptop, "ana@example.com")
        client.post("/sign-out")
        arm_csrf(client)  # a new visitor after signing out: a new token
        assert "Forgot your password?" in html(client.get("/sign-in")).get_text()
        page = html(_ask(client, "Ana@Example.com "))
        assert "a link to choose a new password is on its way" in page.select_one(".notice").get_text()
        ((to, subject, body),) = outbox.sent
        assert to == "ana@example.com" and "within an hour" in body
        link = outbox.link()
        form = html(client.get(link)).select_one("form[action='/reset-password']")
        assert form.select_one("input[name=token]")["value"] in link
        token = form.select_one("input[name=token]")["value"]
        response = client.post(
            "/reset-password", data={"token": token, "password": NEW_PASSWORD}, follow_redirects=False
        )
        assert response.status_code == 303 and response.headers["location"] == "/account?changed=1"
        account = html(client.get("/account?changed=1"))  # signed in with the new password
        assert account.select_one("h1").get_text() == "Your account"
        assert "Every other device was signed out" in account.select_one(".notice").get_text()
        assert laptop.get("/account", follow_redirects=False).status_code == 303, "signed out"
    arm_csrf(client)
    client.post("/sign-out")
    arm_csrf(client)
    sign_in(client, "ana@example.com", NEW_PASSWORD)
    again = client.get(link)
    assert again.status_code == 400 and "used already" in html(again).get_text(), "works once"
    assert (
        client.post(
            "/reset-password", data={"token": link.split("token=")[1], "password": "another four words here"}
        ).status_code
        == 400
    )


def test_an_unknown_address_gets_the_same_answer_and_no_mail(client, outbox):
    page = html(_ask(client, "nobody@example.com"))
    assert "If an account uses that address" in page.select_one(".notice").get_text()
    assert outbox.sent == []


def test_an_old_or_altered_link_is_refused_with_a_way_to_ask_again(client, app):
    sign_up(client, "bea@example.com")
    secret = app.state.settings.secret_key.get_secret_value()
    with app.state.sessionmaker() as session:
        user = session.scalar(select(User))
        old = lifecycle.reset_token(user, secret, now=utcnow() - timedelta(hours=2))
        fresh = lifecycle.reset_token(user, secret)
    for token in (old, fresh[:-2] + "xx", "1.2.3", "", "<script>"):
        page = client.get("/reset-password", params={"token": token})
        assert page.status_code == 400
        assert html(page).select_one("a.button")["href"] == "/forgot-password"
    weak = client.post("/reset-password", data={"token": fresh, "password": "short"})
    assert weak.status_code == 422 and html(weak).select_one("#password-error")


def test_asking_too_often_for_one_address_sends_no_more_mail_and_answers_as_for_anyone(client, outbox):
    sign_up(client, "cy@example.com")
    answers = [_ask(client, "cy@example.com") for _ in range(lifecycle.RESETS_PER_EMAIL + 2)]
    unknown = _ask(client, "nobody-here@example.com")
    assert [a.status_code for a in answers] == [200] * len(answers) == [unknown.status_code] * len(answers)
    notice = {html(a).select_one(".notice").get_text(" ", strip=True) for a in [*answers, unknown]}
    assert len(notice) == 1, "a throttled known address reads as an unknown one"
    assert len(outbox.sent) == lifecycle.RESETS_PER_EMAIL


def test_the_mailed_link_is_under_the_public_url_whatever_the_host(settings, _course):
    """A Host of the attacker's is refused; an allowed one (localhost, in development) still gets
    a link under TREINO_PUBLIC_URL."""
    from app.main import create_app

    app = create_app(
        settings.model_copy(update={"public_url": "https://treino.example.org/"}), course=_course
    )
    app.state.mailer = box = Outbox()
    with TestClient(app) as client:
        arm_csrf(client)
        sign_up(client, "ana@example.com")
        client.post("/sign-out")
        arm_csrf(client)
        poisoned = client.post(
            "/forgot-password", data={"email": "ana@example.com"}, headers={"Host": "attacker.example:8443"}
        )
        assert poisoned.status_code == 400 and box.sent == []
        assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400
        local = client.post(
            "/forgot-password", data={"email": "ana@example.com"}, headers={"Host": "localhost:8000"}
        )
        assert local.status_code == 200
    [(_to, _subject, body)] = box.sent
    assert re.search(r"http\S+", body)[0].startswith("https://treino.example.org/reset-password?token=")


def test_forgot_password_answers_as_fast_for_a_registered_address_as_for_an_unknown_one(
    settings, _course, monkeypatch
):
    """Over real HTTP, with a mail server that takes 200 ms: 30 asks for a registered address and
    30 for unknown ones, interleaved, have medians within noise (the mail goes after the answer)."""
    import statistics
    import threading
    import time

    import httpx2
    import uvicorn

    from app.main import create_app

    class SlowOutbox(Outbox):
        def send(self, to: str, subject: str, body: str) -> None:
            time.sleep(0.2)
            super().send(to, subject, body)

    settings = settings.model_copy(update={"public_url": "http://127.0.0.1:1"})
    app = create_app(settings, course=_course)
    app.state.mailer = box = SlowOutbox()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        with httpx2.Client(base_url=base) as c:
            token = json.loads(html(c.get("/sign-up")).body["hx-headers"])["X-CSRF-Token"]
            assert (
                c.post(
                    "/sign-up", data={"email": "ana@example.com", "password": PASSWORD, "csrf_token": token}
                ).status_code
                == 303
            )
        monkeypatch.setattr(lifecycle, "RESETS_PER_EMAIL", 100)
        monkeypatch.setattr(lifecycle, "RESETS_PER_IP", 100)
        times: dict[str, list[float]] = {"registered": [], "unknown": []}
        with httpx2.Client(base_url=base) as c:
            token = json.loads(html(c.get("/forgot-password")).body["hx-headers"])["X-CSRF-Token"]
            for i in range(60):
                kind = "registered" if i % 2 == 0 else "unknown"
                email = "ana@example.com" if kind == "registered" else f"nobody{i}@example.com"
                started = time.perf_counter()
                response = c.post(
                    "/forgot-password",
                    data={"email": email, "csrf_token": token},
                    headers={"Connection": "close"},
                )
                times[kind].append(time.perf_counter() - started)
                assert response.status_code == 200
                time.sleep(0.25)  # let the previous mail go: each ask meets an idle server
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    registered, unknown = (statistics.median(times[k]) * 1000 for k in ("registered", "unknown"))
    print(f"forgot-password medians over 30 each: registered {registered:.1f} ms, unknown {unknown:.1f} ms")
    assert len(box.sent) == 30
    assert abs(registered - unknown) < 100, (registered, unknown)  # the mail alone takes 200


def test_without_smtp_the_page_says_what_a_learner_can_do(client, app):
    assert app.state.settings.smtp_host is None
    page = html(client.get("/forgot-password"))
    assert "treino accounts reset-password" in page.select_one(".notice code").get_text()
    ways = [li.get_text(" ", strip=True) for li in page.select(".notice li")]
    assert len(ways) == 3
    assert (
        "another device" in ways[0]
        and "Ask the person who runs" in ways[1]
        and "without an account" in ways[2]
    )
    pt = html(client.get("/forgot-password", params={"lang": "pt-BR"}))
    assert "O que você pode fazer" in pt.select_one(".notice").get_text()
    assert not page.select("form[action='/forgot-password']")
    assert _ask(client, "ana@example.com").status_code == 503


@pytest.fixture
def smtp_sink():
    """A real SMTP server on a free loopback port (aiosmtpd), keeping what it receives."""
    from aiosmtpd.controller import Controller

    class Keep:
        def __init__(self):
            self.messages = []

        async def handle_DATA(self, server, session, envelope):
            self.messages.append(envelope)
            return "250 OK"

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    handler = Keep()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, handler
    controller.stop()


def test_the_smtp_sender_delivers_to_a_real_smtp_server(smtp_sink, sqlite_url):
    port, sink = smtp_sink
    settings = Settings(
        database_url=sqlite_url,
        lessons_dir=LESSONS,
        smtp_host="127.0.0.1",
        smtp_port=port,
        smtp_tls="none",
        smtp_from="treino <noreply@example.org>",
        _env_file=None,
    )
    SmtpMailer(settings).send("ana@example.com", "Your treino password", "Open this link: http://x/y")
    (envelope,) = sink.messages
    assert envelope.rcpt_tos == ["ana@example.com"]
    assert envelope.mail_from == "noreply@example.org"
    assert b"Subject: Your treino password" in envelope.content


@pytest.mark.usefixtures("cli_keeps_pytest_logging")
def test_the_operator_prints_a_link_without_mail(client, app, monkeypatch, capsys):
    from worker.cli import main

    sign_up(client, "dee@example.com")
    monkeypatch.setenv("TREINO_DATABASE_URL", app.state.settings.database_url)
    monkeypatch.setenv("TREINO_PUBLIC_URL", "https://treino.example.org/")
    get_settings.cache_clear()
    try:
        assert main(["accounts", "reset-password", "nobody@example.com"]) == 1
        assert "no account" in capsys.readouterr().err
        assert main(["accounts", "reset-password", "DEE@example.com"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out.strip()
    assert out.startswith("https://treino.example.org/reset-password?token=")
    token = out.split("token=")[1]
    client.post("/sign-out")
    arm_csrf(client)
    assert (
        client.post(
            "/reset-password", data={"token": token, "password": NEW_PASSWORD}, follow_redirects=False
        ).status_code
        == 303
    )
    assert html(client.get("/account")).select_one("h1").get_text() == "Your account", "signed in"


def test_a_reset_link_opened_where_a_session_ended_shows_the_form(client, app):
    """A browser still holding the cookie of a session that ended (signed out elsewhere, expired)
    opens the mailed link: the form, not "Your session has ended"; the new password signs it in."""
    sign_up(client, "eve@example.com")
    with app.state.sessionmaker.begin() as session:
        session.execute(delete(AuthSession))  # every session ends (a password change elsewhere)
        user = session.scalar(select(User).where(User.email == "eve@example.com"))
        token = lifecycle.reset_token(user, app.state.settings.secret_key.get_secret_value())
    page = client.get("/reset-password", params={"token": token}, follow_redirects=False)
    assert page.status_code == 200
    form = html(page).select_one("form[action='/reset-password']")
    csrf = form.select_one("input[name=csrf_token]")["value"]
    del client.headers["X-CSRF-Token"]  # the form's own token, as a browser sends it
    done = client.post(
        "/reset-password",
        data={"token": token, "password": NEW_PASSWORD, "csrf_token": csrf},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/account?changed=1"
    assert html(client.get("/account")).select_one("h1").get_text() == "Your account"


def _work(client: TestClient) -> None:
    client.post("/lessons/gradient-accumulation/cards/0", headers={"HX-Request": "true"})
    assert client.post(API_URL, json={"code": "print('mine')"}).status_code == 202


def test_export_holds_my_rows_and_nobody_elses(client, app):
    sign_up(client, "eve@example.com")
    _work(client)
    with TestClient(app) as other:
        arm_csrf(other)
        sign_up(other, "fay@example.com")
        other.post("/lessons/bottleneck/cards/2", headers={"HX-Request": "true"})
    response = client.get("/account/export")
    assert response.headers["content-type"].startswith("application/json")
    assert "attachment" in response.headers["content-disposition"]
    data = json.loads(response.text)
    assert data["account"]["email"] == "eve@example.com"
    assert [s["code"] for s in data["submissions"]] == ["print('mine')"]
    assert [(c["lesson"], c["card"]) for c in data["cards_reached"]] == [("gradient-accumulation", 0)]
    assert all(
        "visitor_id" not in row and "user_id" not in row
        for rows in data.values()
        if isinstance(rows, list)
        for row in rows
    )
    assert client.post("/sign-out").status_code in (200, 303)
    assert client.get("/account/export", follow_redirects=False).status_code == 303, "signed in only"


def test_deleting_the_account_asks_the_password_and_leaves_nothing(client, app):
    sign_up(client, "gus@example.com")
    _work(client)
    with TestClient(app) as other:
        arm_csrf(other)
        sign_up(other, "hal@example.com")
        _work(other)
    wrong = client.post("/account/delete", data={"password": "not it at all"})
    assert wrong.status_code == 422
    assert html(wrong).select_one("details.delete-account[open] #password-error")
    done = client.post("/account/delete", data={"password": PASSWORD})
    assert done.status_code == 200
    assert html(done).select_one("h1").get_text() == "Your account is deleted"
    assert "Sign in" in html(done).select_one(".account-nav").get_text()
    arm_csrf(client)
    with app.state.sessionmaker() as session:
        assert session.scalars(select(User.email)).all() == ["hal@example.com"]
        for model in (Submission, CardReached, QuizAttempt, Draft):
            owners = session.scalars(
                select(func.count()).select_from(model).where(model.user_id.is_not(None))
            ).one()
            assert owners == (1 if model in (Submission, CardReached, Draft) else 0), model
        assert session.scalar(select(func.count()).select_from(AuthSession)) >= 1  # hal's
    assert (
        client.post(
            "/sign-in", data={"email": "gus@example.com", "password": PASSWORD}, follow_redirects=False
        ).status_code
        == 400
    )


@pytest.mark.parametrize(
    ("lang", "says"),
    [
        ("en", "has been deleted, with everything it held"),
        ("pt-BR", "foi excluída, com tudo o que ela guardava"),
    ],
)
def test_after_deleting_the_account_the_other_browser_is_told_so(client, app, lang, says):
    sign_up(client, "ivy@example.com")
    with TestClient(app) as phone:
        arm_csrf(phone)
        sign_in(phone, "ivy@example.com")
        assert client.post("/account/delete", data={"password": PASSWORD}).status_code == 200
        moved = phone.get("/account", params={"lang": lang}, follow_redirects=False)
        assert moved.status_code == 303 and moved.headers["location"] == "/sign-in?deleted=1"
        notice = html(phone.get(f"{moved.headers['location']}&lang={lang}")).select_one(".notice")
        assert says in notice.get_text()
        assert "Sign in again to continue" not in notice.get_text()
        assert "treino_device" not in phone.cookies, "forgotten with the account"
        again = phone.get("/account", follow_redirects=False)
        assert again.headers["location"].startswith("/sign-in?next="), "told once"
    with TestClient(app) as other:  # a session that simply ended still reads as ended
        arm_csrf(other)
        sign_up(other, "joe@example.com")
        with app.state.sessionmaker.begin() as session:
            session.execute(delete(AuthSession))
        assert "expired=1" in other.get("/account", follow_redirects=False).headers["location"]
