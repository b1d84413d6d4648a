"""What a request is: the API's or a page's; and `?next=` is only ever a path on this site."""

import pytest

from app.http import client_key, is_api, safe_next


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


@pytest.mark.parametrize(
    ("host", "client"),
    [
        ("203.0.113.9", "203.0.113.9"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),  # the same subscriber
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),  # the next one is another
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:203.0.113.9", "203.0.113.9"),  # IPv4 on a dual-stack socket
        ("testclient", "testclient"),  # not an address: as it is, still counted
        ("", "unknown"),
    ],
)
def test_a_client_is_its_ipv4_address_or_its_ipv6_64(host, client):
    assert client_key(host) == client
