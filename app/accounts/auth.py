"""The HTTP side of accounts: who is asking (the dependencies routes declare), the session
cookie, and the hooks main.py gives the request middleware to authenticate a request and to
answer one whose session has ended. The services beside this module know nothing of HTTP."""

import hashlib
import hmac
import secrets
from base64 import urlsafe_b64encode
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated
from urllib.parse import urlencode

from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app import i18n
from app.accounts.models import User
from app.accounts.ownership import Learner
from app.accounts.service import Device, names
from app.accounts.sessions import SESSION_LIFETIME, Auth, Via, authenticate
from app.capacity import UNGATED
from app.context import YEAR, visitor_cookie
from app.db import utcnow
from app.errors import Redirect, error_response
from app.http import here, is_api, is_https, redirect
from app.i18n import gettext as _

SESSION_COOKIE = "treino_session"
DEVICE_COOKIE = "treino_device"


async def get_learner(request: Request) -> Learner:
    return Learner(request.state.visitor_id, request.state.auth.user)


async def require_user(request: Request) -> User:
    """The signed-in user; pages without one go to the sign-in page and come back after."""
    if user := request.state.auth.user:
        return user
    if is_api(request.url.path):
        raise HTTPException(
            401,
            _("Sign in first: send the header Authorization: Bearer <token>."),
            headers={"WWW-Authenticate": "Bearer"},
        )
    raise Redirect(sign_in_url(request))


LearnerDep = Annotated[Learner, Depends(get_learner)]
UserDep = Annotated[User, Depends(require_user)]


def sign_in_url(request: Request, *, expired: bool = False) -> str:
    """The sign-in page, coming back to this page after."""
    query = {"next": here(request), **({"expired": "1"} if expired else {})}
    return f"{request.app.url_path_for('sign_in_page')}?{urlencode(query)}"


# ---------------------------------------------------------------- the session cookie


def session_cookie(secure: bool) -> str:
    """The session cookie's name: `__Host-` over HTTPS, so no subdomain or plain-HTTP page can set it."""
    return f"__Host-{SESSION_COOKIE}" if secure else SESSION_COOKIE


def _our_cookie(
    request: Request, response: Response, name: Callable[[bool], str], value: str | None, max_age: int = 0
) -> None:
    """Set one of the accounts' cookies (``value``) or delete it (None): httponly, SameSite=Lax,
    and over HTTPS Secure, under its ``__Host-`` name."""
    secure = is_https(request)
    if value is None:
        response.delete_cookie(name(secure), httponly=True, samesite="lax", secure=secure)
    else:
        response.set_cookie(
            name(secure), value, max_age=max_age, httponly=True, samesite="lax", secure=secure
        )


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    _our_cookie(request, response, session_cookie, token, int(SESSION_LIFETIME.total_seconds()))


def clear_session_cookie(request: Request, response: Response) -> None:
    _our_cookie(request, response, session_cookie, None)


def forget_browser(request: Request, response: Response) -> None:
    """Whoever uses this browser next starts afresh (sign-out, a deleted account): no session, a
    new visitor, and no drafts kept by the page."""
    clear_session_cookie(request, response)
    _our_cookie(request, response, visitor_cookie, None)
    response.headers["Clear-Site-Data"] = '"storage"'


# ---------------------------------------------------------------- the device cookie


def device_cookie(secure: bool) -> str:
    return f"__Host-{DEVICE_COOKIE}" if secure else DEVICE_COOKIE


def _device_mac(request: Request, payload: str) -> str:
    secret = request.app.state.settings.secret_key.get_secret_value()
    digest = hmac.new(secret.encode(), f"device:{payload}".encode(), hashlib.sha256)
    return urlsafe_b64encode(digest.digest()[:18]).decode()


def remember_device(request: Request, response: Response, user: User) -> None:
    """This browser signed in to `user`'s account: from now on its sign-ins there do not wait
    for failures elsewhere (app/accounts/service.py), and once the account is deleted it is told
    so. Kept at sign-out: it is the way back in."""
    payload = f"{user.id}.{int(utcnow().timestamp())}.{secrets.token_urlsafe(18)}"
    _our_cookie(request, response, device_cookie, f"{payload}.{_device_mac(request, payload)}", YEAR)


def forget_device(request: Request, response: Response) -> None:
    _our_cookie(request, response, device_cookie, None)


def known_device(request: Request) -> Device | None:
    """The device cookie's (account id, when issued, this browser's id), when this server made it."""
    payload, _sep, mac = request.cookies.get(device_cookie(is_https(request)), "").rpartition(".")
    parts = payload.split(".")
    if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()) or len(payload) > 100:
        return None
    if not hmac.compare_digest(mac.encode(), _device_mac(request, payload).encode()):
        return None
    return int(parts[0]), int(parts[1]), parts[2]


# ---------------------------------------------------------------- the middleware's hooks


async def authenticate_request(request: Request) -> Auth:
    """The session cookie anywhere, a bearer token under /api/; what passes the gate (static
    files, the liveness probe, a page's wait for its submission) needs neither, so it takes no
    thread or connection the gate does not count. Its own transaction: it runs before any
    route's."""
    if request.url.path.startswith(UNGATED):
        return Auth()
    via: Via
    scheme, _sep, token = request.headers.get("authorization", "").partition(" ")
    if is_api(request.url.path) and scheme.lower() == "bearer":
        via, credential = "bearer", token.strip()
    elif cookie := request.cookies.get(session_cookie(is_https(request))):
        via, credential = "cookie", cookie
    else:
        return Auth()
    asked = i18n.supported(request.query_params.get("lang"))

    device = known_device(request) if via == "cookie" else None

    def check() -> Auth:
        with request.app.state.sessionmaker.begin() as session:
            auth = authenticate(session, credential, via, asked)
            if auth.expired and device is not None and not names(device, session.get(User, device[0])):
                return replace(auth, account_deleted=True)  # the account this browser knew is gone
            return auth

    auth = await run_in_threadpool(check)
    if auth.expired and request.url.path == request.app.url_path_for("reset_password_page"):
        return Auth()  # a reset link needs no session: one that ended is not in its way
    return auth


def session_ended(request: Request) -> Response:
    """The answer to a request whose session or token is no longer valid: pages go to the
    sign-in page (and come back after), the API answers 401."""
    if request.state.auth.account_deleted:
        response = redirect(request, f"{request.app.url_path_for('sign_in_page')}?deleted=1")
        forget_device(request, response)
    elif not is_api(request.url.path):
        response = redirect(request, sign_in_url(request, expired=True))
    else:
        response = error_response(
            request,
            401,
            _("Your session has ended or the token was revoked. Sign in again."),
            code="token_invalid",
        )
        response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    if request.state.auth.via == "cookie":
        clear_session_cookie(request, response)
    return response
