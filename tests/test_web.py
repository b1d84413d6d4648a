"""`?next=` is only ever a path on this site."""

import pytest

from app.web import safe_next
from tests.conftest import html


@pytest.mark.parametrize(("value", "expected"), [
    ("/lessons/bottleneck", "/lessons/bottleneck"),
    ("/lessons/bottleneck?lang=pt-BR#card", "/lessons/bottleneck?lang=pt-BR#card"),
    (None, "/"), ("", "/"),
    ("https://evil.example/", "/"), ("//evil.example", "/"), ("///evil.example", "/"),
    ("/\\evil.example", "/"), ("\\\\evil.example", "/"), ("javascript:alert(1)", "/"),
    ("http:/evil.example", "/"), ("/ok\r\nSet-Cookie: x=1", "/"), ("/ok\tx", "/"),
    ("lessons/bottleneck", "/"), ("/" + "x" * 3000, "/"),
])
def test_safe_next(value, expected):
    assert safe_next(value) == expected


def test_an_error_page_says_nothing_was_stored_only_where_something_was_sent(client):
    shown = html(client.get("/lessons/no-such-lesson")).select_one("main .lead").get_text(strip=True)
    assert "stored" not in shown
    response = client.post("/lessons/no-such-lesson/quiz/q1", data={"option": "a"})
    assert response.status_code == 404
    sent = html(response).select_one("main .lead").get_text(strip=True)
    assert sent.endswith("Nothing you sent was stored.")
    pt = client.post("/lessons/no-such-lesson/quiz/q1", params={"lang": "pt-BR"}, data={"option": "a"})
    assert html(pt).select_one("main .lead").get_text(strip=True).endswith(
        "Nada do que você enviou foi guardado.")
