"""Web security: the headers every response carries, and the CSRF defence for unsafe requests.

CSRF, in two layers. (1) An unsafe request must not come from another site: `Sec-Fetch-Site`
must be same-origin (or none: typed by the user), else `Origin`, when sent, must be this site.
(2) Pages send a per-session token (per visitor while anonymous): htmx in the `X-CSRF-Token`
header from `<body hx-headers>`, plain forms in the hidden `csrf_token` field. API calls with a
bearer token need neither (browsers never attach one by themselves); other API calls need the
token only when the session cookie signs them in.
"""

import hashlib
import hmac
from base64 import urlsafe_b64encode

from fastapi import HTTPException, Request

from app.http import is_api
from app.i18n import gettext as _

# Text from a request: no NUL (PostgreSQL cannot store one). A pattern also makes pydantic refuse
# a lone surrogate (a JSON "\ud800"), which no database can encode. Both are a 422 before
# anything is stored.
TEXT_PATTERN = r"^[^\x00]*$"
MAX_ID = 2**31 - 1  # ids are SQL INTEGERs: PostgreSQL refuses a larger one (a 500, unchecked)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

_POLICY = (
    "default-src 'self'; script-src {script}; style-src {style}; img-src {img}; "
    "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'self'; "
    "form-action 'self'"
)
CSP = _POLICY.format(script="'self'", style="'self'", img="'self' data:")
# /docs only: FastAPI's Swagger UI loads from jsDelivr and starts itself with an inline script.
DOCS_CSP = _POLICY.format(
    script="'self' 'unsafe-inline' https://cdn.jsdelivr.net",
    style="'self' 'unsafe-inline' https://cdn.jsdelivr.net",
    img="'self' data: https://fastapi.tiangolo.com",
)
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect")


def security_headers(path: str, https: bool) -> dict[str, str]:
    headers = {
        "Content-Security-Policy": DOCS_CSP if path in DOCS_PATHS else CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "X-Frame-Options": "DENY",
        "Cross-Origin-Opener-Policy": "same-origin",
    }
    if https:
        headers["Strict-Transport-Security"] = "max-age=31536000"
    return headers


def csrf_token(secret: str, identity: str) -> str:
    """The token for one session or visitor: derived, so nothing needs storing."""
    digest = hmac.new(secret.encode(), f"csrf:{identity}".encode(), hashlib.sha256).digest()
    return urlsafe_b64encode(digest).decode().rstrip("=")


def same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    # No Origin: not a browser, or a very old one; the token below still applies to pages.
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


async def verify_csrf(request: Request) -> None:
    """App-wide dependency: refuse a state-changing request that another site could forge."""
    if request.method in SAFE_METHODS:
        return
    auth = request.state.auth
    if auth.via == "bearer":
        return
    if not same_origin(request):
        raise HTTPException(403, _("This request came from another site and was refused."))
    if is_api(request.url.path) and auth.via != "cookie":
        return
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(FORM_TYPES):
        value = (await request.form()).get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    if not sent or not hmac.compare_digest(sent.encode(), request.state.csrf_token.encode()):
        if is_api(request.url.path):
            raise HTTPException(
                403,
                _(
                    "Signed in by cookie, this request needs the X-CSRF-Token "
                    "header; API clients use a bearer token instead."
                ),
            )
        raise HTTPException(403, _("This form has expired. Reload the page and try again."))
