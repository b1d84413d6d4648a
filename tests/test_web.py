"""`?next=` is only ever a path on this site."""

import pytest

from app.web import safe_next


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
