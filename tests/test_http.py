"""What a request is: the API's or a page's; and `?next=` is only ever a path on this site."""

import pytest

from app.http import is_api, safe_next


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/api/lessons", True),
        ("/api/", True),
        ("/api", False),
        ("/apiary", False),
        ("/lessons/api/x", False),
        ("/", False),
    ],
)
def test_is_api(path, api):
    assert is_api(path) is api


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/lessons/bottleneck", "/lessons/bottleneck"),
        ("/lessons/bottleneck?lang=pt-BR#card", "/lessons/bottleneck?lang=pt-BR#card"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example", "/"),
        ("///evil.example", "/"),
        ("/\\evil.example", "/"),
        ("\\\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("http:/evil.example", "/"),
        ("/ok\r\nSet-Cookie: x=1", "/"),
        ("/ok\tx", "/"),
        ("lessons/bottleneck", "/"),
        ("/" + "x" * 3000, "/"),
    ],
)
def test_safe_next(value, expected):
    assert safe_next(value) == expected
