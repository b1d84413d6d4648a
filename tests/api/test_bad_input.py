"""Bad input on every route, pages and API, on SQLite and on PostgreSQL: a lone surrogate in JSON,
a NUL byte, an id past 64 bits get a 4xx that says what is wrong (never a 500), and the error page
says that nothing was stored."""

import re

import pytest
from fastapi.routing import APIRoute

from app.errors import leaf_routes
from app.security import MAX_ID
from tests.conftest import PASSWORD, html, sign_up

API_SUBMIT = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"
PAGE_SUBMIT = "/lessons/gradient-accumulation/exercises/accumulate/submissions"
DRAFT = "/lessons/gradient-accumulation/exercises/accumulate/draft"
SURROGATE = b'"\\ud800"'  # a lone surrogate, as JSON escapes it: valid JSON, not storable text
NOT_TEXT = "this contains a character that is not text (a NUL or a lone surrogate)."
TOO_LARGE = "this number is too large."
JSON = {"Content-Type": "application/json"}
# Every text field any route reads, sent to every route.
FIELDS = (
    "code",
    "mode",
    "email",
    "password",
    "option",
    "current_password",
    "new_password",
    "next",
    "confirm",
    "token",
)


@pytest.fixture
def learner(db_client):
    sign_up(db_client, "ana@example.com")
    return db_client


def _json(**fields: bytes) -> bytes:
    return b"{" + b", ".join(b'"%s": %s' % (k.encode(), v) for k, v in fields.items()) + b"}"


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        (
            "/api/accounts",
            _json(email=b'"a\\ud800@example.com"', password=b'"%s"' % PASSWORD.encode()),
            "email",
        ),
        ("/api/accounts", _json(email=b'"ana@example.com"', password=b'"correct\\u0000horse"'), "password"),
        ("/api/tokens", _json(email=SURROGATE, password=b'"x"'), "email"),
        ("/api/tokens", _json(email=b'"ana@example.com"', password=b'"\\u0000"'), "password"),
        (API_SUBMIT, _json(code=SURROGATE), "code"),
        (API_SUBMIT, _json(code=b'"x = 1\\u0000"'), "code"),
    ],
)
def test_api_text_that_cannot_be_stored_is_a_422_naming_the_field(learner, url, body, field):
    response = learner.post(url, content=body, headers=JSON)
    assert response.status_code == 422, response.text
    error = response.json()
    assert (error["code"], error["message"]) == ("invalid_input", f"{field}: {NOT_TEXT}")
    assert [(d["loc"], d["message"]) for d in error["detail"]] == [(["body", field], f"{field}: {NOT_TEXT}")]


@pytest.mark.parametrize(
    ("submission_id", "status"),
    [(2**64, 422), (2**63, 422), (MAX_ID + 1, 422), (10**40, 422), (0, 422), (-1, 422), (MAX_ID, 404)],
)
def test_api_ids_out_of_range_are_422_and_the_largest_is_an_honest_404(learner, submission_id, status):
    response = learner.get(f"/api/submissions/{submission_id}")
    assert response.status_code == status, response.text
    if submission_id > MAX_ID:
        assert response.json()["message"] == f"submission_id: {TOO_LARGE}"


def test_page_forms_refuse_a_nul_and_say_nothing_was_stored(learner):
    response = learner.post(PAGE_SUBMIT, data={"code": "x = 1\x00"})
    assert response.status_code == 422
    lead = html(response).select_one("main .lead").get_text(strip=True)
    assert lead == f"code: {NOT_TEXT} Nothing you sent was stored."
    assert learner.get(f"{DRAFT}").status_code == 404, "not even as a draft"
    response = learner.post(
        "/account/password", data={"current_password": PASSWORD, "new_password": "new\x00password words"}
    )
    assert response.status_code == 422 and "Nothing you sent was stored." in response.text
    for url in ("/sign-in", "/sign-up"):
        response = learner.post(url, data={"email": "ana\x00@example.com", "password": PASSWORD})
        assert response.status_code == 422, (url, response.text)


def test_page_ids_out_of_range_are_a_4xx_page(learner):
    for method, url in (
        ("GET", f"/submissions/{2**64}"),
        ("POST", f"/submissions/{2**64}/cancel"),
        ("POST", f"/lessons/bottleneck/cards/{2**64}"),
    ):
        response = learner.request(method, url)
        assert 400 <= response.status_code < 500, (url, response.status_code)
        assert response.headers["content-type"].startswith("text/html")


def test_drafts_refuse_a_lone_surrogate(learner):
    response = learner.put(DRAFT, content=_json(code=SURROGATE), headers=JSON)
    assert response.status_code == 422 and NOT_TEXT in response.text
    assert learner.get(DRAFT).status_code == 404


def test_no_route_answers_bad_input_with_a_500(learner, db_app, course):
    """Every route of the app, whoever adds it: each path parameter a NUL, a number past 64 bits
    or a lone surrogate (UTF-8-encoded, percent-escaped), or each one valid; with no body, every
    text field a lone surrogate (JSON), or every one with a NUL (form)."""
    routes = [r for r in leaf_routes(db_app.routes) if isinstance(r, APIRoute)]
    assert len(routes) > 15
    submission = learner.post(API_SUBMIT, json={"code": "x = 1"}).json()["id"]
    valid = {
        "slug": "gradient-accumulation",
        "exercise_slug": "accumulate",
        "card": "0",
        "question_id": course.lesson("gradient-accumulation").questions[0].id,
        "submission_id": str(submission),
        "answer_id": "1",  # the tutor's (none here: not configured, so a 404)
        "class_id": "1",  # no class here: a 404, or a redirect to sign in (":int" converters dropped above)
        "user_id": "1",
        "code": "NOCLASSCODE",
    }
    json_body = _json(**dict.fromkeys(FIELDS, SURROGATE))
    form_body = dict.fromkeys(FIELDS, "a\x00b")
    seen = []
    for route in routes:
        for method in sorted(route.methods - {"HEAD"}):
            for value in ("x%00y", str(2**64), "%ED%A0%80", None):
                url = re.sub(r"\{([^}]+)\}", lambda m, v=value: v or valid[m[1].split(":")[0]], route.path)
                bodies = (
                    [{}]
                    if method == "GET"
                    else [{}, {"content": json_body, "headers": JSON}, {"data": form_body}]
                )
                for kwargs in bodies:
                    response = learner.request(method, url, **kwargs)
                    if (route.path, response.status_code) == ("/readyz", 503):
                        continue  # no worker runs here: not ready, as documented
                    assert response.status_code < 500, (method, url, kwargs, response.text[:300])
                    seen.append(response.status_code)
    assert 422 in seen and 404 in seen
