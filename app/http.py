"""What a request is and where it leads: the API's or a page's, htmx's or not, over HTTPS or not,
from which client, sent from which page; and the redirect that suits it."""

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
    """The client's address. Behind a proxy that uvicorn trusts (TREINO_FORWARDED_ALLOW_IPS), the
    address the proxy forwarded (X-Forwarded-For), not the proxy's own."""
    return request.client.host if request.client else "unknown"


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
