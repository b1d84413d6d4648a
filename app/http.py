"""What a request is and where it leads: the API's or a page's, htmx's or not, over HTTPS or not,
from which client, sent from which page; and the redirect that suits it."""

import ipaddress
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

API_PREFIX = "/api/"


def is_api(path: str) -> bool:
    """Whether `path` is the JSON API's: bearer tokens count there, errors are JSON, a page's
    CSRF token is not asked of a bearer, and a missing sign-in is a 401, not the sign-in page."""
    return path.startswith(API_PREFIX)


def is_htmx(request: Request) -> bool:
    return (
        request.headers.get("HX-Request") == "true"
        and request.headers.get("HX-History-Restore-Request") != "true"
    )


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"  # uvicorn runs with proxy_headers: the proxy's scheme


def client_ip(request: Request) -> str:
    """The client every per-client limit and the queue's fairness count by: its IPv4 address, or
    its IPv6 /64 (one subscriber holds 2^64 addresses). Behind a proxy named in
    TREINO_FORWARDED_ALLOW_IPS, the address that proxy forwarded (X-Forwarded-For), not its own."""
    return client_key(request.client.host if request.client else "")


def client_key(host: str) -> str:
    """`host` as a client: an IPv6 address as its /64 ("2001:db8:1:2::/64"), an IPv4-mapped one
    as the IPv4 address; a name that is not an address as it is."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def safe_next(value: str | None) -> str:
    """`value` when it is a path on this site, else "/": a `?next=` never leads elsewhere."""
    if (
        not value
        or len(value) > 2000
        or not value.startswith("/")
        or value.startswith("//")
        or any(c == "\\" or ord(c) < 32 or ord(c) == 127 for c in value)
    ):
        return "/"
    parts = urlsplit(value)
    return "/" if parts.scheme or parts.netloc else value


def here(request: Request) -> str:
    """The page the learner is on (for htmx and form posts, the page that sent the request)."""
    if request.method in ("GET", "HEAD") and not is_htmx(request):
        return request.url.path + (f"?{request.url.query}" if request.url.query else "")
    page = urlsplit(request.headers.get("HX-Current-URL") or request.headers.get("referer") or "")
    if page.netloc != request.url.netloc:
        return "/"
    return safe_next(page.path + (f"?{page.query}" if page.query else ""))


def redirect(request: Request, url: str) -> Response:
    """See-other for plain requests; htmx gets HX-Redirect, so the whole page moves."""
    if is_htmx(request):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)
