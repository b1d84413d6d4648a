"""Accounts through pages and the API: sign-up, sign-in, sign-out, tokens, password change,
expired sessions, messages in the learner's language."""

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, select, text, update

from app.accounts.models import AuthSession, User
from app.db import utcnow
from tests.conftest import PASSWORD, arm_csrf, html, sign_in, sign_up

HTMX = {"HX-Request": "true"}


def _db(app):
    return app.state.sessionmaker()


def _token(client: TestClient, email: str, password: str = PASSWORD) -> str:
    response = client.post("/api/tokens", json={"email": email, "password": password})
    assert response.status_code == 201, response.text
    return response.json()["token"]


def _api_client(app) -> TestClient:
    return TestClient(app)  # no cookies: how a script calls the API


# ---------------------------------------------------------------- pages


def test_header_offers_sign_in_and_up_then_shows_the_account(client):
    nav = html(client.get("/lessons/bottleneck")).select_one("header nav.account-nav")
    links = {a.get_text(strip=True): a["href"] for a in nav.select("a")}
    assert links == {
        "Sign in": "/sign-in?next=%2Flessons%2Fbottleneck",
        "Sign up": "/sign-up?next=%2Flessons%2Fbottleneck",
    }
    sign_up(client, "ana@example.com")
    nav = html(client.get("/")).select_one("header nav.account-nav")
    assert nav.select_one("a.account-email").get_text(strip=True) == "ana@example.com"
    form = nav.select_one("form")
    assert (form["method"], form["action"]) == ("post", "/sign-out")
    assert form.select_one("input[name=csrf_token]")["value"] == client.headers["X-CSRF-Token"]


@pytest.mark.parametrize("page", ["/sign-in", "/sign-up"])
def test_account_forms_label_every_input_and_help_password_managers(client, page):
    form = html(client.get(page)).select_one("main form")
    assert form["method"] == "post"
    visible = form.select("input:not([type=hidden])")
    assert [i["name"] for i in visible] == ["email", "password"]
    for field in visible:
        assert form.select_one(f"label[for={field['id']}]").get_text(strip=True)
        assert field.get("autocomplete")
    assert visible[0]["type"] == "email"
    assert visible[1]["autocomplete"] == ("current-password" if page == "/sign-in" else "new-password")
    assert form.select_one("input[name=csrf_token]")["value"]


def test_sign_up_signs_in_and_returns_to_next(client, app):
    response = sign_up(client, " Ana@Example.COM ")
    assert response.headers["location"] == "/"
    response = client.post("/sign-out", follow_redirects=False)
    arm_csrf(client)
    response = client.post(
        "/sign-in",
        data={"email": "ana@example.com", "password": PASSWORD, "next": "/lessons/bottleneck?lang=en"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/lessons/bottleneck?lang=en"
    with _db(app) as db:
        assert db.scalars(select(User.email)).all() == ["ana@example.com"]


def test_sign_out_ends_the_session_at_the_server(client, app):
    sign_up(client, "ana@example.com")
    cookie = client.cookies["treino_session"]
    response = client.post("/sign-out", follow_redirects=False)
    assert response.status_code == 303
    assert "treino_session" not in client.cookies
    assert "treino_visitor" not in client.cookies, "the next person on this browser starts afresh"
    with _db(app) as db:
        assert db.scalars(select(AuthSession)).all() == []
    client.cookies.set("treino_session", cookie)  # replayed: revoked, so it signs nobody in
    response = client.get("/account", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/sign-in?")


@pytest.mark.parametrize(
    ("lang", "message"), [("en", "Wrong e-mail or password."), ("pt-BR", "E-mail ou senha incorretos.")]
)
def test_sign_in_does_not_reveal_whether_an_address_is_registered(client, lang, message):
    sign_up(client, "ana@example.com")
    client.post("/sign-out")
    client.cookies.clear()
    arm_csrf(client)
    answers = []
    for email in ("ana@example.com", "nobody@example.com"):
        response = client.post(
            "/sign-in", params={"lang": lang}, data={"email": email, "password": "not the password at all"}
        )
        page = html(response)
        answers.append(
            (
                response.status_code,
                page.select_one(".form-error").get_text(strip=True),
                page.select_one("input[name=email]")["value"],
            )
        )
    assert answers == [(400, message, "ana@example.com"), (400, message, "nobody@example.com")]


@pytest.mark.parametrize(
    ("lang", "password", "message"),
    [
        ("en", "short", "Use at least 8 characters."),
        ("pt-BR", "short", "Use pelo menos 8 caracteres."),
        (
            "en",
            "password1",
            "This password is too common or too easy to guess. A few unrelated words "
            "make a strong one that is easy to remember.",
        ),
        (
            "en",
            "Sunshine1",
            "This password is too common or too easy to guess. A few unrelated words "
            "make a strong one that is easy to remember.",
        ),
        (
            "en",
            "ana@example.com",
            "This password is too common or too easy to guess. A few unrelated "
            "words make a strong one that is easy to remember.",
        ),
    ],
)
def test_weak_or_common_passwords_are_refused(client, app, lang, password, message):
    response = client.post(
        "/sign-up", params={"lang": lang}, data={"email": "ana@example.com", "password": password}
    )
    assert response.status_code == 422
    page = html(response)
    field = page.select_one("input[name=password]")
    assert field["aria-invalid"] == "true"
    assert page.select_one("#password-error").get_text(strip=True) == message
    assert "password-error" in field["aria-describedby"]
    with _db(app) as db:
        assert db.scalars(select(User)).all() == []


@pytest.mark.parametrize(
    "email", ["", "ana", "ana@", "@example.com", "ana@example", "a b@example.com", "x" * 250 + "@example.com"]
)
def test_an_invalid_address_is_refused(client, email):
    response = client.post("/sign-up", data={"email": email, "password": PASSWORD})
    assert response.status_code == 422
    assert html(response).select_one("#email-error").get_text(strip=True) == (
        "Enter a valid e-mail address, like name@example.com."
    )


def test_a_malformed_form_is_a_clear_4xx(client):
    response = client.post("/sign-in", data={})
    assert response.status_code == 400
    assert html(response).select_one(".form-error").get_text(strip=True) == "Wrong e-mail or password."


def test_a_duplicate_address_gets_a_clear_message(client):
    sign_up(client, "ana@example.com")
    client.post("/sign-out")
    arm_csrf(client)
    response = client.post("/sign-up", data={"email": "ANA@example.com", "password": PASSWORD + "!"})
    assert response.status_code == 422
    assert html(response).select_one("#email-error").get_text(strip=True) == (
        "This e-mail address cannot be used for a new account. If it is yours, sign in instead."
    )


@pytest.mark.parametrize(
    "next_url",
    [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "javascript:alert(1)",
        "http:/evil.example",
    ],
)
def test_next_never_leads_to_another_site(client, next_url):
    response = client.post(
        "/sign-up",
        data={"email": "ana@example.com", "password": PASSWORD, "next": next_url},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/"


def test_signed_in_sign_in_page_goes_on_to_next(client):
    sign_up(client, "ana@example.com")
    response = client.get("/sign-in", params={"next": "/lessons/bottleneck"}, follow_redirects=False)
    assert response.headers["location"] == "/lessons/bottleneck"


def test_account_page_needs_a_sign_in_and_comes_back(client):
    response = client.get("/account", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/sign-in?next=%2Faccount"
    sign_up(client, "ana@example.com")
    page = html(client.get("/account"))
    assert page.select_one("main h1").get_text(strip=True) == "Your account"
    form = page.select_one("main form")
    fields = form.select("input:not([type=hidden])")
    assert [(f["name"], f["autocomplete"]) for f in fields] == [
        ("current_password", "current-password"),
        ("new_password", "new-password"),
    ]


# ---------------------------------------------------------------- sessions end


def _age_sessions(app, **values) -> None:
    with _db(app) as db, db.begin():
        db.execute(update(AuthSession).values(**values))


@pytest.mark.parametrize(
    "values",
    [
        {"expires_at": utcnow() - timedelta(minutes=1)},  # past its lifetime
        {"last_seen_at": utcnow() - timedelta(days=31)},  # idle too long
    ],
)
def test_an_expired_session_goes_to_sign_in_and_back(client, app, values):
    sign_up(client, "ana@example.com")
    _age_sessions(app, **values)
    response = client.get("/lessons/bottleneck", params={"lang": "en"}, follow_redirects=False)
    assert response.status_code == 303
    location = urlsplit(response.headers["location"])
    assert location.path == "/sign-in"
    assert parse_qs(location.query) == {"next": ["/lessons/bottleneck?lang=en"], "expired": ["1"]}
    assert "treino_session" not in client.cookies, "the dead cookie is cleared"
    page = html(client.get(response.headers["location"]))
    assert page.select_one(".notice").get_text(strip=True) == (
        "Your session has ended. Sign in again to continue where you left off."
    )
    assert page.select_one("input[name=next]")["value"] == "/lessons/bottleneck?lang=en"
    arm_csrf(client)
    response = client.post(
        "/sign-in",
        data={"email": "ana@example.com", "password": PASSWORD, "next": "/lessons/bottleneck?lang=en"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/lessons/bottleneck?lang=en"


def test_an_expired_session_in_an_htmx_request_moves_the_whole_page(client, app, course):
    sign_up(client, "ana@example.com")
    _age_sessions(app, expires_at=utcnow() - timedelta(minutes=1))
    question = course.lesson("bottleneck").questions[0]
    response = client.post(
        f"/lessons/bottleneck/quiz/{question.id}",
        data={"option": "x"},
        headers={**HTMX, "HX-Current-URL": "http://testserver/lessons/bottleneck"},
    )
    assert response.status_code == 204
    assert response.headers["HX-Redirect"] == "/sign-in?next=%2Flessons%2Fbottleneck&expired=1"


def test_password_change_ends_every_other_session_and_token(client, app):
    sign_up(client, "ana@example.com")
    with TestClient(app) as other, _api_client(app) as api:
        arm_csrf(other)
        sign_in(other, "ana@example.com")
        token = _token(api, "ana@example.com")
        response = client.post(
            "/account/password",
            data={"current_password": PASSWORD, "new_password": "a brand new passphrase"},
            follow_redirects=False,
        )
        assert response.headers["location"] == "/account?changed=1"
        assert html(client.get("/account?changed=1")).select_one(".notice").get_text(strip=True) == (
            "Your password was changed. Every other device was signed out."
        )
        assert other.get("/account", follow_redirects=False).headers["location"].startswith("/sign-in")
        assert api.get("/api/account", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert (
            api.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}).status_code
            == 401
        )
        _token(api, "ana@example.com", "a brand new passphrase")


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (
            {"current_password": "wrong one here", "new_password": "a brand new passphrase"},
            "current_password",
            "The current password is not right.",
        ),
        (
            {"current_password": PASSWORD, "new_password": "iloveyou2"},
            "new_password",
            "This password is too common or too easy to guess. A few unrelated words make "
            "a strong one that is easy to remember.",
        ),
    ],
)
def test_password_change_refusals_name_the_field(client, data, field, message):
    sign_up(client, "ana@example.com")
    response = client.post("/account/password", data=data)
    assert response.status_code == 422
    assert html(response).select_one(f"#{field}-error").get_text(strip=True) == message


# ---------------------------------------------------------------- the API


def test_api_accounts_tokens_and_revocation(app):
    with _api_client(app) as api:
        response = api.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
        assert response.status_code == 201
        assert response.json() == {"email": "ana@example.com", "lang": "en"}
        token = _token(api, "ana@example.com")
        bearer = {"Authorization": f"Bearer {token}"}
        assert api.get("/api/account", headers=bearer).json()["email"] == "ana@example.com"
        assert api.delete("/api/tokens", headers=bearer).status_code == 204
        response = api.get("/api/account", headers=bearer)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json() == {
            "code": "token_invalid",
            "detail": None,
            "message": "Your session has ended or the token was revoked. Sign in again.",
        }
        assert api.get("/api/progress", headers=bearer).status_code == 401
        assert api.delete("/api/tokens", headers=bearer).status_code == 401


def test_api_without_a_token_is_401_where_an_account_is_needed(app):
    with _api_client(app) as api:
        assert api.get("/api/account").status_code == 401
        assert api.delete("/api/tokens").status_code == 401
        assert api.get("/api/account", headers={"Authorization": "Bearer made-up"}).status_code == 401


@pytest.mark.parametrize(
    ("lang", "body", "status", "detail"),
    [
        ("en", {"email": "ana@example.com"}, 422, "password: this is required."),
        ("pt-BR", {"email": "ana@example.com"}, 422, "password: é obrigatório."),
        ("en", {"email": 3, "password": PASSWORD}, 422, "email: this has the wrong type."),
        ("en", [], 422, "this has the wrong type."),
        ("en", {"email": "ana@example.com", "password": "short"}, 422, "Use at least 8 characters."),
        (
            "pt-BR",
            {"email": "nope", "password": PASSWORD},
            422,
            "Digite um endereço de e-mail válido, como nome@exemplo.com.",
        ),
    ],
)
def test_api_bad_input_is_a_json_4xx_in_the_learners_language(app, lang, body, status, detail):
    with _api_client(app) as api:
        response = api.post("/api/accounts", params={"lang": lang}, json=body)
    assert (response.status_code, response.json()["message"]) == (status, detail)
    assert response.json()["code"] == "invalid_input"


def test_api_malformed_json_and_duplicates(app):
    with _api_client(app) as api:
        response = api.post("/api/tokens", content=b"{nope", headers={"Content-Type": "application/json"})
        assert (response.status_code, response.json()["message"]) == (
            422,
            "The request body is not valid JSON.",
        )
        api.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
        response = api.post("/api/accounts", json={"email": "ana@example.com", "password": PASSWORD})
        assert response.status_code == 409
        assert response.json()["code"] == "email_taken"
        assert "cannot be used" in response.json()["message"]
        for email in ("ana@example.com", "nobody@example.com"):
            response = api.post("/api/tokens", json={"email": email, "password": "wrong password"})
            assert (response.status_code, response.json()) == (
                401,
                {"code": "wrong_credentials", "message": "Wrong e-mail or password.", "detail": None},
            )


# ---------------------------------------------------------------- secrets at rest, language


def test_no_password_or_token_is_stored_in_plain_text(db_client, db_app):
    sign_up(db_client, "ana@example.com")
    cookie = db_client.cookies["treino_session"]
    with _api_client(db_app) as api:
        token = _token(api, "ana@example.com")
    secrets = (PASSWORD, cookie, token)
    with _db(db_app) as db:
        for table in inspect(db.get_bind()).get_table_names():
            for row in db.execute(text(f'SELECT * FROM "{table}"')):
                for value in row:
                    assert not any(s in str(value) for s in secrets), f"a secret in {table}: {row}"
        stored = db.scalars(select(User.password_hash)).one()
    assert stored.startswith("$argon2id$")


def test_the_language_is_kept_on_the_account(client, app):
    sign_up(client, "ana@example.com")
    client.get("/", params={"lang": "pt-BR"})
    with _db(app) as db:
        assert db.scalars(select(User.lang)).one() == "pt-BR"
    with TestClient(app) as laptop:  # another device, in English, and an English cookie
        laptop.cookies.set("treino_lang", "en")
        arm_csrf(laptop)
        assert html(laptop.get("/", headers={"Accept-Language": "en"})).html["lang"] == "en"
        sign_in(laptop, "ana@example.com")
        assert html(laptop.get("/", headers={"Accept-Language": "en"})).html["lang"] == "pt-BR"
        assert html(laptop.get("/", params={"lang": "en"})).html["lang"] == "en"
    with _db(app) as db:
        assert db.scalars(select(User.lang)).one() == "en"


def test_a_sign_in_that_changes_the_language_says_so_once_and_offers_it_back(client, app):
    """An account that reads Portuguese, signed in from a browser reading English: the pages turn
    Portuguese (the account's choice wins), and the first of them says why, with a link back to
    English written in English; the next page says nothing more (issue 44)."""
    sign_up(client, "bia@example.com")
    client.get("/", params={"lang": "pt-BR"})
    with TestClient(app) as laptop:
        laptop.cookies.set("treino_lang", "en")
        arm_csrf(laptop)
        response = laptop.post(
            "/sign-in", data={"email": "bia@example.com", "password": PASSWORD}, follow_redirects=False
        )
        assert response.status_code == 303
        page = html(laptop.get(response.headers["location"]))
        assert page.html["lang"] == "pt-BR"
        note = page.select_one(".lang-note")
        assert note is not None and "A sua conta usa o treino em Português" in note.get_text()
        back = note.select_one("a[hreflang=en]")
        assert back is not None and back.get_text() == "Read it in English" and back["href"] == "?lang=en"
        again = html(laptop.get("/"))
        assert again.html["lang"] == "pt-BR" and again.select_one(".lang-note") is None, "said once"
        assert html(laptop.get("/", params={"lang": "en"})).html["lang"] == "en"
    # the same language on both sides: nothing to say
    with TestClient(app) as phone:
        phone.cookies.set("treino_lang", "en")
        arm_csrf(phone)
        response = phone.post(
            "/sign-in", data={"email": "bia@example.com", "password": PASSWORD}, follow_redirects=False
        )
        assert html(phone.get(response.headers["location"])).select_one(".lang-note") is None
