"""CSRF on every unsafe request (forms and htmx), the Origin check, bearer calls without CSRF, the
security headers on every response, and cookies over HTTPS."""

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from app.security import CSP
from tests.conftest import PASSWORD, arm_csrf, csrf_token, html, sign_up

HTMX = {"HX-Request": "true"}


@pytest.fixture
def quiz_url(course) -> tuple[str, dict]:
    question = course.lesson("bottleneck").questions[0]
    return f"/lessons/bottleneck/quiz/{question.id}", {"option": question.correct_option.id}


@pytest.fixture
def bare(client) -> TestClient:
    """The client without the header htmx would send: what a forged request looks like."""
    del client.headers["X-CSRF-Token"]
    return client


def test_a_plain_form_post_carries_its_token_in_a_hidden_field(bare, quiz_url):
    url, data = quiz_url
    page = html(bare.get("/lessons/bottleneck"))
    token = page.select_one(f"form[action='{url}'] input[name=csrf_token]")["value"]
    assert bare.post(url, data={**data, "csrf_token": token}, follow_redirects=False).status_code == 303


@pytest.mark.parametrize("htmx", [False, True])
def test_an_unsafe_request_without_the_token_is_refused(bare, quiz_url, htmx):
    url, data = quiz_url
    response = bare.post(url, data=data, headers=HTMX if htmx else {})
    assert response.status_code == 403
    assert html(response).select_one("main .lead").get_text(strip=True) == (
        "This form has expired. Reload the page and try again. Nothing you sent was stored."
    )


@pytest.mark.parametrize("token", ["", "nope", "A" * 43])
def test_a_wrong_token_is_refused(bare, quiz_url, token):
    url, data = quiz_url
    assert bare.post(url, data={**data, "csrf_token": token}).status_code == 403
    assert bare.post(url, data=data, headers={**HTMX, "X-CSRF-Token": token}).status_code == 403


def test_another_visitors_token_is_refused(app, bare, quiz_url):
    url, data = quiz_url
    with TestClient(app) as other:
        theirs = csrf_token(other)
    assert bare.post(url, data=data, headers={**HTMX, "X-CSRF-Token": theirs}).status_code == 403


def test_the_token_changes_when_signing_in(client):
    anonymous = client.headers["X-CSRF-Token"]
    sign_up(client, "ana@example.com")
    assert client.headers["X-CSRF-Token"] != anonymous
    assert client.post("/sign-out", headers={"X-CSRF-Token": anonymous}).status_code == 403


@pytest.mark.parametrize("path", ["/sign-in", "/sign-up", "/sign-out"])
def test_account_forms_need_the_token_too(bare, path):
    response = bare.post(path, data={"email": "ana@example.com", "password": PASSWORD})
    assert response.status_code == 403


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "https://testserver"},  # the right host, the wrong scheme
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},
    ],
)
def test_a_request_from_another_site_is_refused_even_with_the_token(client, quiz_url, headers):
    url, data = quiz_url
    response = client.post(url, data=data, headers={**HTMX, **headers})
    assert response.status_code == 403
    assert html(response).select_one("main .lead").get_text(strip=True) == (
        "This request came from another site and was refused. Nothing you sent was stored."
    )
    response = client.post(
        "/api/accounts", json={"email": "a@example.com", "password": PASSWORD}, headers=headers
    )
    assert response.status_code == 403


@pytest.mark.parametrize("headers", [{"Origin": "http://testserver"}, {"Sec-Fetch-Site": "same-origin"}])
def test_a_same_origin_request_passes(client, quiz_url, headers):
    url, data = quiz_url
    assert client.post(url, data=data, headers={**HTMX, **headers}).status_code == 200


def test_bearer_calls_need_no_csrf_but_cookie_calls_to_the_api_do(client, app):
    sign_up(client, "ana@example.com")
    response = client.post(
        "/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}, headers={"X-CSRF-Token": ""}
    )
    assert response.status_code == 403, "signed in by cookie: the API wants the token as well"
    assert "X-CSRF-Token" in response.json()["message"]
    with TestClient(app) as api:
        token = api.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}).json()[
            "token"
        ]
        response = api.delete(
            "/api/tokens", headers={"Authorization": f"Bearer {token}", "Origin": "https://evil.example"}
        )
        assert response.status_code == 204


def test_get_never_changes_anything(client):
    assert client.get("/sign-out").status_code == 405
    assert client.get("/lessons/bottleneck/cards/0").status_code == 405


# ---------------------------------------------------------------- headers


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/lessons/bottleneck",
        "/sign-in",
        "/nope",
        "/api/lessons",
        "/api/nope",
        "/static/css/app.css",
        "/openapi.json",
    ],
)
def test_every_response_carries_the_security_headers(client, path):
    response = client.get(path)
    assert response.headers["Content-Security-Policy"] == CSP
    assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP
    assert "frame-ancestors 'none'" in CSP
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "Strict-Transport-Security" not in response.headers, "HSTS only over HTTPS"


def test_errors_carry_the_headers_too(client):
    response = client.post("/lessons/bottleneck/cards/0", content=b"x" * (300 * 1024))
    assert response.status_code == 413
    assert response.headers["Content-Security-Policy"] == CSP


def test_pages_need_no_inline_script_or_style(client):
    sign_up(client, "ana@example.com")
    for path in ("/", "/lessons/gradient-accumulation", "/account", "/nope"):
        page = html(client.get(path))
        assert all(script.get("src") for script in page.select("script")), path
        assert not page.select("style, [style]"), path
        assert not [tag for tag in page.find_all(True) if any(a.startswith("on") for a in tag.attrs)]


def test_the_api_docs_get_a_policy_relaxed_for_them_only(client):
    response = client.get("/docs")
    assert response.status_code == 200
    policy = response.headers["Content-Security-Policy"]
    assert "https://cdn.jsdelivr.net" in policy and "frame-ancestors 'none'" in policy
    assert client.get("/redoc").status_code == 404


def test_over_https_cookies_are_secure_and_hsts_is_sent(app):
    with TestClient(app, base_url="https://testserver") as secure:
        arm_csrf(secure)
        response = sign_up(secure, "ana@example.com")
        cookie = next(
            c for c in response.headers.get_list("set-cookie") if c.startswith("__Host-treino_session=")
        )
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "secure", "samesite=lax", "path=/"} <= attributes
        assert not any(a.startswith("domain") for a in attributes)
        page = secure.get("/")
        assert page.headers["Strict-Transport-Security"] == "max-age=31536000"
        assert html(page).select_one("a.account-email").get_text(strip=True) == "ana@example.com"
    with TestClient(app) as plain:
        visitor = plain.get("/").headers.get_list("set-cookie")
        assert all("secure" not in c.lower() for c in visitor)


# ---------------------------------------------------------------- identity cookies


def _set_visitor(response) -> str | None:
    """The visitor id a response issues, if it issues one."""
    for cookie in response.headers.get_list("set-cookie"):
        name, _sep, rest = cookie.partition("=")
        if name.endswith("treino_visitor"):
            return rest.split(";")[0]
    return None


def _exercise_draft_key(client) -> str:
    page = html(client.get("/lessons/gradient-accumulation/exercises/accumulate"))
    return page.select_one("textarea#code")["data-draft-key"]


@pytest.mark.parametrize("chosen", ["a" * 32, "A" * 40, "a" * 32 + ".forgedmacforgedmacforg"])
def test_a_visitor_id_the_server_did_not_issue_is_replaced_never_adopted(app, chosen, quiz_url):
    with TestClient(app) as client:
        client.cookies.set("treino_visitor", chosen)
        page = client.get("/lessons/bottleneck")
        issued = _set_visitor(page)
        assert issued and issued != chosen
        arm_csrf(client)
        url, data = quiz_url
        client.post(url, data=data, headers=HTMX)
    with app.state.sessionmaker() as db:
        from app.quizzes.models import QuizAttempt

        assert [a.visitor_id for a in db.query(QuizAttempt)] == [issued]


def test_an_issued_visitor_id_is_kept_and_rotated_at_sign_up_and_sign_in(client):
    issued = client.cookies["treino_visitor"]
    assert _set_visitor(client.get("/")) is None, "a valid id is not reissued"
    key = _exercise_draft_key(client)
    assert issued not in key, "the page never shows the HttpOnly id itself"
    with TestClient(client.app) as other:
        assert _exercise_draft_key(other) != key, "another visitor's drafts are kept apart"
    signed_up = _set_visitor(sign_up(client, "ana@example.com"))
    assert signed_up and signed_up != issued
    assert _exercise_draft_key(client) != key
    client.post("/sign-out")
    arm_csrf(client)
    before = client.cookies["treino_visitor"]
    response = client.post(
        "/sign-in", data={"email": "ana@example.com", "password": PASSWORD}, follow_redirects=False
    )
    assert response.status_code == 303
    assert _set_visitor(response) not in (None, before)


def test_sign_out_clears_the_pages_storage_and_the_visitor(client):
    sign_up(client, "ana@example.com")
    response = client.post("/sign-out", follow_redirects=False)
    assert response.headers["Clear-Site-Data"] == '"storage"'
    assert any(
        c.startswith('treino_visitor=""') and "max-age=0" in c.lower()
        for c in response.headers.get_list("set-cookie")
    )


def test_over_https_the_visitor_cookie_is_host_prefixed(app):
    with TestClient(app, base_url="https://testserver") as secure:
        cookie = next(
            c
            for c in secure.get("/").headers.get_list("set-cookie")
            if c.startswith("__Host-treino_visitor=")
        )
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "secure", "path=/"} <= attributes
        assert not any(a.startswith("domain") for a in attributes)
        issued = cookie.split(";")[0].split("=", 1)[1]
        assert _set_visitor(secure.get("/")) is None, "kept"
        secure.cookies.clear()
        secure.cookies.set("treino_visitor", issued)  # without the prefix over HTTPS: not taken
        assert _set_visitor(secure.get("/")) not in (None, issued)


# ---------------------------------------------------------------- sign-in throttling, passwords


def test_failed_sign_ins_elsewhere_cannot_lock_the_owner_out(app, monkeypatch):
    from app.accounts import service

    monkeypatch.setattr(service, "SIGN_IN_FAILURES_PER_EMAIL", 3)
    with (
        TestClient(app, client=("203.0.113.9", 5000)) as attacker,
        TestClient(app, client=("198.51.100.7", 5000)) as owner,
    ):
        owner.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
        wrong = {"email": "ana@example.com", "password": "not the password"}
        assert [attacker.post("/api/tokens", json=wrong).status_code for _ in range(4)] == [401] * 3 + [429]
        right = {"email": "ana@example.com", "password": PASSWORD}
        assert attacker.post("/api/tokens", json=right).status_code == 429, "the attacker stays locked"
        assert owner.post("/api/tokens", json=right).status_code == 201, "the owner is not"


@pytest.mark.parametrize("password", [" " * 8, "\t \n " * 4, "\u00a0" * 10])
def test_a_password_of_spaces_only_is_refused(client, password):
    response = client.post("/api/accounts", json={"email": "ana@example.com", "password": password})
    assert response.status_code == 422
    assert response.json()["message"] == "A password cannot be only spaces."
    page = client.post("/sign-up", data={"email": "ana@example.com", "password": password})
    assert page.status_code == 422
    error = html(page).select_one("#password-error").get_text(strip=True)
    assert error == "A password cannot be only spaces."


# ---------------------------------------------------------------- /metrics, fair use per client IP


def test_metrics_can_be_closed_with_a_token(settings, _course):
    from app.main import create_app

    closed = create_app(
        settings.model_copy(update={"metrics_token": SecretStr("s3cret-scrape")}), course=_course
    )
    with TestClient(closed) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-scrape"}):
            response = client.get("/metrics", headers=headers)
            assert response.status_code == 401
            assert response.json()["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"] == "Bearer"
        response = client.get("/metrics", headers={"Authorization": "Bearer s3cret-scrape"})
        assert response.status_code == 200 and "treino_queue_depth" in response.text
    with TestClient(create_app(settings, course=_course)) as client:
        assert client.get("/metrics").status_code == 200, "open when no token is set"


SUBMIT_URL = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"


def _submitter(app, peer: str = "127.0.0.1"):
    """A cookie-less learner each time (a new visitor), connecting from `peer`, sending the
    X-Forwarded-For it likes."""

    def submit(forwarded: str | None = None, lang: str = "en"):
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        with TestClient(app, client=(peer, 1)) as fresh:
            return fresh.post(SUBMIT_URL, params={"lang": lang}, json={"code": "x = 1"}, headers=headers)

    return submit


def _finish_all(app) -> None:
    """A worker graded every job: none waits any more (the per-client queued cap is not reached)."""
    from sqlalchemy import update

    from app.submissions.models import Submission

    with app.state.sessionmaker.begin() as db:
        db.execute(update(Submission).values(status="passed", active_owner=None))


def test_cookie_less_visitors_from_one_address_cannot_flood_the_queue(settings, _course):
    """Behind a proxy named in TREINO_FORWARDED_ALLOW_IPS, the forwarded address counts."""
    from app.main import create_app

    app = create_app(
        settings.model_copy(update={"submissions_per_ip": 3, "forwarded_allow_ips": "127.0.0.1"}),
        course=_course,
    )
    submit = _submitter(app)
    assert [submit("203.0.113.9").status_code for _ in range(3)] == [202] * 3
    _finish_all(app)
    refused = submit("203.0.113.9")
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"
    assert 9 * 60 < int(refused.headers["Retry-After"]) <= 10 * 60
    assert submit("198.51.100.7").status_code == 202, "another address is not held back"
    assert submit("203.0.113.9, 198.51.100.99").status_code == 202, (
        "the proxy's own entry is the one believed"
    )


def test_without_a_proxy_configured_x_forwarded_for_changes_nothing(settings, _course):
    """The default trusts no proxy: a client on 127.0.0.1 (`make run`'s own machine) sending a
    fresh X-Forwarded-For each time is still one client (it was 0 of 25 throttled with 127.0.0.1
    trusted by default, against 15 of 25 without the header)."""
    from app.main import create_app

    assert settings.forwarded_allow_ips == ""
    app = create_app(
        settings.model_copy(update={"submissions_per_ip": 10, "queued_per_client": 100}), course=_course
    )
    submit = _submitter(app)
    statuses = [submit(f"198.51.100.{n}").status_code for n in range(25)]
    assert statuses.count(429) == 15


def test_fresh_ipv6_addresses_of_one_64_are_one_client(settings, _course):
    from app.main import create_app

    app = create_app(
        settings.model_copy(update={"submissions_per_ip": 3, "queued_per_client": 100}), course=_course
    )
    statuses = []
    for n in range(5):
        with TestClient(app, client=(f"2001:db8:1:2:{n:x}::{n + 7:x}", 1)) as fresh:
            statuses.append(fresh.post(SUBMIT_URL, json={"code": "x = 1"}).status_code)
    assert statuses == [202] * 3 + [429] * 2
    with TestClient(app, client=("2001:db8:1:3::1", 1)) as neighbour:
        assert neighbour.post(SUBMIT_URL, json={"code": "x = 1"}).status_code == 202, (
            "the next /64 is another"
        )


def test_an_anonymous_client_holds_a_few_queued_jobs_and_is_told_why(settings, _course):
    """Fresh cookies per submission from one address: past TREINO_QUEUED_PER_CLIENT waiting jobs
    the next is refused, saying why and what to do (both languages); a signed-in learner from the
    same address still gets a place; once a job is graded, a place is free again."""
    from app.main import create_app

    app = create_app(settings.model_copy(update={"queued_per_client": 2}), course=_course)
    submit = _submitter(app, peer="203.0.113.9")
    assert [submit().status_code for _ in range(2)] == [202, 202]
    refused = submit()
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "30"
    assert refused.json()["message"].startswith("Too much code from your network is waiting")
    assert "sign in" in refused.json()["message"]
    pt = submit(lang="pt-BR").json()["message"]
    assert pt.startswith("Já há código demais da sua rede") and "entre na sua conta" in pt
    with TestClient(app, client=("203.0.113.9", 1)) as page:
        arm_csrf(page)
        form = page.post(
            "/lessons/gradient-accumulation/exercises/accumulate/submissions",
            data={"code": "x = 1"},
            headers={"HX-Request": "true"},
        )
        assert form.status_code == 429
        assert "Too much code from your network" in html(form).get_text()
        page.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
        token = page.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}).json()[
            "token"
        ]
        signed_in = page.post(
            SUBMIT_URL, json={"code": "x = 1"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert signed_in.status_code == 202, "signing in lifts the cap"
    _finish_all(app)
    assert submit().status_code == 202


def test_the_code_anonymous_visitors_of_one_address_keep_is_bounded(settings, _course):
    """Storage, not only rate (issue 43): the code every cookie-less visitor behind one address
    has sent is kept until retention prunes it; past TREINO_ANONYMOUS_CODE_KB_PER_CLIENT the next
    Submit is refused, saying to sign in (both languages), while another address and a signed-in
    learner behind this one still send."""
    from app.main import create_app

    app = create_app(settings.model_copy(update={"anonymous_code_kb_per_client": 1}), course=_course)
    big = "x = 1\n" + "# padding\n" * 60  # 0.6 KB: the second passes the kilobyte, the third is refused

    def send(peer: str, lang: str = "en"):
        with TestClient(app, client=(peer, 1)) as fresh:
            return fresh.post(SUBMIT_URL, params={"lang": lang}, json={"code": big})

    assert [send("203.0.113.7").status_code for _ in range(2)] == [202, 202]
    _finish_all(app)
    refused = send("203.0.113.7")
    assert refused.status_code == 429
    assert refused.json()["message"].startswith("Visitors without an account on your network have sent")
    assert "Sign in" in refused.json()["message"]
    assert "Entre na sua conta" in send("203.0.113.7", lang="pt-BR").json()["message"]
    assert send("198.51.100.7").status_code == 202, "another address keeps its own"
    with TestClient(app, client=("203.0.113.7", 1)) as page:
        page.post("/api/accounts", json={"email": "bo@example.com", "password": PASSWORD})
        tokens = page.post("/api/tokens", json={"email": "bo@example.com", "password": PASSWORD})
        token = tokens.json()["token"]
        mine = page.post(SUBMIT_URL, json={"code": big}, headers={"Authorization": f"Bearer {token}"})
        assert mine.status_code == 202, "a signed-in learner's code is the account's"


# ---------------------------------------------------------------- treino check's plain output


@pytest.mark.usefixtures("cli_keeps_pytest_logging")
def test_treino_check_shows_terminal_escapes_in_the_learners_output_instead_of_obeying_them(
    tmp_path, monkeypatch, capsys
):
    """Window title, clipboard (OSC 52), clear screen, a carriage return over the verdict line,
    a bidi override: written out in the plain verdict; --json escapes them as JSON does."""
    import contextlib
    import json

    from contracts.verdict import record
    from worker import cli, grading

    hostile = "\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2J\rpassed\u202e\x9b31m\nline two\tend"

    class Fake:
        def grade(self, exercise, code):
            return record(exercise.id, "failed", output=hostile)

    monkeypatch.setattr(
        grading.Grader, "running", classmethod(lambda cls, *a, **k: contextlib.nullcontext(Fake()))
    )
    program = tmp_path / "loop.py"
    program.write_text("print('hi')\n")
    assert cli.main(["check", "gradient-accumulation/accumulate", str(program)]) == 1
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r\x9b\u202e")
    assert "\\x1b]52;c;ZWNobyBoaQ==\\x07\\x1b[2J" in out and "passed\\u202e\\x9b31m" in out
    assert "line two\tend" in out, "newlines and tabs stay"
    assert cli.main(["check", "gradient-accumulation/accumulate", str(program), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["output"] == hostile


# ---------------------------------------------------------------- the public URL, allowed hosts


def test_production_needs_a_public_url_and_allows_only_its_host(tmp_path):
    from pydantic import ValidationError

    from app.config import Settings

    secret = {"env": "production", "secret_key": SecretStr("x" * 40), "_env_file": None}
    with pytest.raises(ValidationError, match="TREINO_PUBLIC_URL must be set in production"):
        Settings(**secret)
    with pytest.raises(ValidationError, match="TREINO_PUBLIC_URL must be an http"):
        Settings(**secret, public_url="treino.example.org")
    live = Settings(**secret, public_url="https://treino.example.org/", allowed_hosts="127.0.0.1, Web-1")
    assert live.site_url() == "https://treino.example.org"
    assert live.trusted_hosts() == ["treino.example.org", "127.0.0.1", "web-1"], "no localhost in production"
    dev = Settings(_env_file=None)
    assert dev.site_url() == "http://127.0.0.1:8000" and "localhost" in dev.trusted_hosts()
    assert (
        Settings(_env_file=None, public_url="http://[2001:db8::5]:8000").trusted_hosts()[0] == "[2001:db8::5]"
    )
