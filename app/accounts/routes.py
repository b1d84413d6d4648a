import json
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session

from app.accounts import lifecycle, mail, service, sessions, throttling
from app.accounts.auth import (
    LearnerDep,
    UserDep,
    forget_browser,
    forget_device,
    known_device,
    remember_device,
    set_session_cookie,
)
from app.accounts.models import User
from app.accounts.passwords import PASSWORD_MIN, AccountError
from app.accounts.schemas import AccountOut, Credentials, NewAccount, TokenOut
from app.accounts.service import EmailTaken
from app.accounts.sessions import SESSION_LIFETIME
from app.accounts.throttling import Throttled
from app.context import rotate_visitor
from app.db import SessionDep, utcnow
from app.errors import ApiError, documented, too_many
from app.http import client_ip, is_https, redirect, safe_next
from app.i18n import gettext as _
from app.security import TEXT_PATTERN
from app.web import LANG_WAS_COOKIE, render

router = APIRouter(tags=["accounts"])  # the API's routes; the pages are not in its schema
FormText = Annotated[str, Form(pattern=TEXT_PATTERN)]


@dataclass
class SignInForm:
    """What the sign-up and sign-in forms send: an address, a password, the page to go back to."""

    email: FormText = ""
    password: FormText = ""
    next: FormText = "/"


SignInFields = Annotated[SignInForm, Depends()]


def _form_page(
    request: Request,
    template: str,
    status_code: int = 200,
    *,
    error: AccountError | Throttled | None = None,
    **context,
) -> Response:
    """An account form, with the refusal beside its field (or above the form)."""
    errors = {}
    if error is not None:
        errors[getattr(error, "field", None) or "form"] = str(error)
    response = render(
        request,
        template,
        {"email": "", "errors": errors, "password_min": PASSWORD_MIN, **context},
        status_code=status_code,
    )
    if isinstance(error, Throttled):
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _refused(
    request: Request, template: str, error: AccountError | Throttled, invalid: int = 422, **context
) -> Response:
    """The form again with its refusal: 429 when throttled, else ``invalid``."""
    status = 429 if isinstance(error, Throttled) else invalid
    return _form_page(request, template, status, error=error, **context)


def _create_account(
    request: Request, session: Session, learner: LearnerDep, email: str, password: str
) -> User:
    """An account for this browser's learner (the form's and the API's), in the page's language."""
    return service.create_account(
        session,
        email,
        password,
        lang=request.state.lang,
        visitor_id=learner.visitor_id,
        ip=client_ip(request),
    )


def _signed_in(request: Request, session: Session, user: User, next_url: str) -> Response:
    """A fresh session on every sign-in (the old one, if any, ends), then back to `next_url`."""
    if request.state.auth.via == "cookie":
        sessions.end_session(session, request.state.auth.session_id)
    token = sessions.start_session(session, user, kind="browser", visitor_id=request.state.visitor_id)
    rotate_visitor(request)  # what the old visitor id did is the account's now
    response = RedirectResponse(next_url, status_code=303)
    set_session_cookie(request, response, token)
    remember_device(request, response, user)
    if user.lang and user.lang != request.state.lang:
        # the account's language wins from now on (app/web.choose_lang): the next page says so
        # and offers the one the learner was reading back (app/web.render, base.html)
        response.set_cookie(
            LANG_WAS_COOKIE,
            request.state.lang,
            max_age=300,
            httponly=True,
            samesite="lax",
            secure=is_https(request),
        )
    return response


@router.get("/sign-up", response_class=HTMLResponse, include_in_schema=False)
def sign_up_page(request: Request, next: str = "/"):
    return _form_page(request, "sign_up.html", next_url=safe_next(next))


@router.post("/sign-up", response_class=HTMLResponse, include_in_schema=False)
def sign_up(request: Request, session: SessionDep, learner: LearnerDep, form: SignInFields):
    next_url = safe_next(form.next)
    try:
        user = _create_account(request, session, learner, form.email, form.password)
    except (AccountError, Throttled) as e:
        return _refused(request, "sign_up.html", e, email=form.email, next_url=next_url)
    return _signed_in(request, session, user, next_url)


@router.get("/sign-in", response_class=HTMLResponse, include_in_schema=False)
def sign_in_page(request: Request, next: str = "/", expired: bool = False, deleted: bool = False):
    if request.state.auth.user:
        return redirect(request, safe_next(next))
    notice = _("Your session has ended. Sign in again to continue where you left off.") if expired else None
    if deleted:
        notice = _(
            "The account this browser was signed in to has been deleted, with everything it held. "
            "You can go on without an account, or sign up again."
        )
    return _form_page(request, "sign_in.html", next_url=safe_next(next), notice=notice)


@router.post("/sign-in", response_class=HTMLResponse, include_in_schema=False)
def sign_in(request: Request, session: SessionDep, form: SignInFields):
    next_url = safe_next(form.next)
    try:
        user = service.check_password(
            session, form.email, form.password, ip=client_ip(request), device=known_device(request)
        )
    except (AccountError, Throttled) as e:
        return _refused(request, "sign_in.html", e, 400, email=form.email, next_url=next_url, notice=None)
    return _signed_in(request, session, user, next_url)


@router.post("/sign-out", include_in_schema=False)
def sign_out(request: Request, session: SessionDep):
    if request.state.auth.via == "cookie":
        sessions.end_session(session, request.state.auth.session_id)
    response = RedirectResponse(request.app.url_path_for("course_page"), status_code=303)
    forget_browser(request, response)
    return response


@router.get("/account", response_class=HTMLResponse, include_in_schema=False)
def account_page(request: Request, user: UserDep, changed: bool = False):
    notice = _("Your password was changed. Every other device was signed out.") if changed else None
    return _form_page(request, "account.html", notice=notice)


@router.post("/account/password", response_class=HTMLResponse, include_in_schema=False)
def change_password(
    request: Request,
    session: SessionDep,
    user: UserDep,
    current_password: FormText = "",
    new_password: FormText = "",
):
    try:
        service.change_password(
            session,
            user,
            current_password,
            new_password,
            keep_session=request.state.auth.session_id,
            ip=client_ip(request),
        )
    except (AccountError, Throttled) as e:
        return _refused(request, "account.html", e, notice=None)
    return RedirectResponse(f"{request.app.url_path_for('account_page')}?changed=1", status_code=303)


# ---------------------------------------------------------------- a forgotten password, leaving


def _mailer(request: Request):
    state = request.app.state
    return state.mailer if hasattr(state, "mailer") else mail.mailer(state.settings)


def _secret(request: Request) -> str:
    return request.app.state.settings.secret_key.get_secret_value()


@router.get("/forgot-password", response_class=HTMLResponse, include_in_schema=False)
def forgot_password_page(request: Request):
    return _form_page(request, "forgot_password.html", can_mail=_mailer(request) is not None, sent=False)


@router.post("/forgot-password", response_class=HTMLResponse, include_in_schema=False)
def forgot_password(request: Request, session: SessionDep, tasks: BackgroundTasks, email: FormText = ""):
    """A one-time link by e-mail. The answer is the same, and as quick, whether or not the address
    has an account: it is given before anything looks the address up (the mail goes after it)."""
    sender = _mailer(request)
    if sender is None:
        return _form_page(request, "forgot_password.html", 503, can_mail=False, sent=False)
    try:
        throttling.spend(
            session, f"reset-ip:{client_ip(request)}", lifecycle.RESETS_PER_IP, lifecycle.RESET_WINDOW
        )
    except Throttled as e:
        return _refused(request, "forgot_password.html", e, can_mail=True, sent=False, email=email)
    state = request.app.state
    tasks.add_task(
        lifecycle.mail_reset_link, state.sessionmaker, sender, state.settings, email, request.state.lang
    )
    return _form_page(request, "forgot_password.html", can_mail=True, sent=True)


@router.get("/reset-password", response_class=HTMLResponse, include_in_schema=False)
def reset_password_page(request: Request, session: SessionDep, token: str = ""):
    try:
        lifecycle.user_for_token(session, token, _secret(request))
    except AccountError as e:
        return _form_page(request, "reset_password.html", 400, error=e, token="", valid=False)
    return _form_page(request, "reset_password.html", token=token, valid=True)


@router.post("/reset-password", response_class=HTMLResponse, include_in_schema=False)
def reset_password(request: Request, session: SessionDep, token: FormText = "", password: FormText = ""):
    try:
        user = lifecycle.reset_password(session, token, password, _secret(request))
    except AccountError as e:
        valid = e.field == "password"
        return _form_page(
            request,
            "reset_password.html",
            422 if valid else 400,
            error=e,
            token=token if valid else "",
            valid=valid,
        )
    # every other device was signed out; this one is signed in with the new password
    return _signed_in(request, session, user, f"{request.app.url_path_for('account_page')}?changed=1")


@router.get("/account/export", include_in_schema=False)
def export_account(session: SessionDep, user: UserDep) -> Response:
    """Everything the account owns, as a JSON file."""
    body = json.dumps(lifecycle.export(session, user), ensure_ascii=False, indent=2)
    return Response(
        body,
        media_type="application/json",
        headers={
            "Content-Disposition": 'attachment; filename="treino-account.json"',
            "Cache-Control": "no-store",
        },
    )


@router.post("/account/delete", response_class=HTMLResponse, include_in_schema=False)
def delete_account(request: Request, session: SessionDep, user: UserDep, password: FormText = ""):
    try:
        lifecycle.delete_account(
            session, user, password, ip=client_ip(request), visitor_id=request.state.visitor_id
        )
    except (AccountError, Throttled) as e:
        return _refused(request, "account.html", e, notice=None, delete_error=True)
    request.state.auth = sessions.Auth()  # the page that follows is a visitor's
    response = render(request, "account_deleted.html")
    forget_browser(request, response)
    forget_device(request, response)
    return response


# ---------------------------------------------------------------- the API twins


@router.post(
    "/api/accounts",
    status_code=201,
    response_model=AccountOut,
    responses=documented(
        409,
        422,
        429,
        s409="`email_taken`: the address cannot be used",
        s422="Invalid address or weak password",
        s429="`throttled`: too many sign-ups from this client address",
    ),
)
def create_account(
    request: Request, body: NewAccount, session: SessionDep, learner: LearnerDep
) -> AccountOut:
    """Create an account. Then get a token from `POST /api/tokens`."""
    try:
        user = _create_account(request, session, learner, body.email, body.password)
    except EmailTaken as e:
        raise ApiError(409, str(e), code="email_taken") from None
    except AccountError as e:
        raise ApiError(422, str(e), code="invalid_input") from None
    except Throttled as e:
        raise too_many(str(e), e.retry_after) from None
    return AccountOut(email=user.email, lang=user.lang)


@router.post(
    "/api/tokens",
    status_code=201,
    response_model=TokenOut,
    responses=documented(
        401,
        429,
        s401="`wrong_credentials`: wrong e-mail or password",
        s429="`throttled`: too many failed attempts; see Retry-After",
    ),
)
def create_token(request: Request, body: Credentials, session: SessionDep) -> TokenOut:
    """Sign in: a bearer token for the other `/api` calls."""
    try:
        user = service.check_password(
            session,
            body.email,
            body.password,
            ip=client_ip(request),
            device=known_device(request),
        )
    except AccountError as e:
        session.commit()  # the failure counts although the answer is an error
        raise ApiError(
            401, str(e), code="wrong_credentials", headers={"WWW-Authenticate": "Bearer"}
        ) from None
    except Throttled as e:
        raise too_many(str(e), e.retry_after) from None
    token = sessions.start_session(session, user, kind="api", visitor_id=request.state.visitor_id)
    rotate_visitor(request)
    return TokenOut(token=token, expires_at=utcnow() + SESSION_LIFETIME)


@router.delete(
    "/api/tokens",
    status_code=204,
    responses=documented(401, s401="No valid bearer token was sent"),
)
def revoke_token(request: Request, session: SessionDep, user: UserDep) -> Response:
    """Revoke the bearer token this request was sent with."""
    if request.state.auth.via != "bearer":
        raise ApiError(
            401,
            _("Send the token to revoke as Authorization: Bearer <token>."),
            code="unauthorized",
            headers={"WWW-Authenticate": "Bearer"},
        )
    sessions.end_session(session, request.state.auth.session_id)
    return Response(status_code=204)


@router.get(
    "/api/account",
    response_model=AccountOut,
    responses=documented(401, s401="Not signed in"),
)
def read_account(user: UserDep) -> AccountOut:
    """The signed-in account."""
    return AccountOut(email=user.email, lang=user.lang)
