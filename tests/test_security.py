"""CSRF on every unsafe request (forms and htmx), the Origin check, bearer calls without CSRF, the
security headers on every response, and cookies over HTTPS."""

import pytest
from fastapi.testclient import TestClient

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
        "This form has expired. Reload the page and try again. Nothing you sent was stored.")


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


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
    {"Origin": "https://testserver"},  # the right host, the wrong scheme
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},
])
def test_a_request_from_another_site_is_refused_even_with_the_token(client, quiz_url, headers):
    url, data = quiz_url
    response = client.post(url, data=data, headers={**HTMX, **headers})
    assert response.status_code == 403
    assert html(response).select_one("main .lead").get_text(strip=True) == (
        "This request came from another site and was refused. Nothing you sent was stored.")
    response = client.post("/api/accounts", json={"email": "a@example.com", "password": PASSWORD},
                           headers=headers)
    assert response.status_code == 403


@pytest.mark.parametrize("headers", [{"Origin": "http://testserver"}, {"Sec-Fetch-Site": "same-origin"}])
def test_a_same_origin_request_passes(client, quiz_url, headers):
    url, data = quiz_url
    assert client.post(url, data=data, headers={**HTMX, **headers}).status_code == 200


def test_bearer_calls_need_no_csrf_but_cookie_calls_to_the_api_do(client, app):
    sign_up(client, "ana@example.com")
    response = client.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD},
                           headers={"X-CSRF-Token": ""})
    assert response.status_code == 403, "signed in by cookie: the API wants the token as well"
    assert "X-CSRF-Token" in response.json()["message"]
    with TestClient(app) as api:
        token = api.post("/api/tokens", json={"email": "ana@example.com", "password": PASSWORD}
                         ).json()["token"]
        response = api.delete("/api/tokens", headers={"Authorization": f"Bearer {token}",
                                                      "Origin": "https://evil.example"})
        assert response.status_code == 204


def test_get_never_changes_anything(client):
    assert client.get("/sign-out").status_code == 405
    assert client.get("/lessons/bottleneck/cards/0").status_code == 405


# ---------------------------------------------------------------- headers

@pytest.mark.parametrize("path", ["/", "/lessons/bottleneck", "/sign-in", "/nope", "/api/lessons",
                                  "/api/nope", "/static/css/app.css", "/openapi.json"])
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
        cookie = next(c for c in response.headers.get_list("set-cookie")
                      if c.startswith("__Host-treino_session="))
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "secure", "samesite=lax", "path=/"} <= attributes
        assert not any(a.startswith("domain") for a in attributes)
        page = secure.get("/")
        assert page.headers["Strict-Transport-Security"] == "max-age=31536000"
        assert html(page).select_one("a.account-email").get_text(strip=True) == "ana@example.com"
    with TestClient(app) as plain:
        visitor = plain.get("/").headers.get_list("set-cookie")
        assert all("secure" not in c.lower() for c in visitor)
