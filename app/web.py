"""Templating: one render() for pages and their htmx fragments, and the visitor's language."""

import hashlib
from functools import lru_cache
from typing import Any

from jinja2 import (
    Environment,
    FileSystemLoader,
    StrictUndefined,
    pass_context,
    select_autoescape,
)
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from app import i18n
from app.config import ROOT
from app.http import here
from app.i18n import gettext as _
from contracts.languages import LANGS

LANG_COOKIE = "treino_lang"
# set at a sign-in whose account reads another language than the page did: the language the
# learner was reading, so that the next page says it changed and offers it back (once)
LANG_WAS_COOKIE = "treino_lang_was"

_env = Environment(
    loader=FileSystemLoader(ROOT / "templates"),
    autoescape=select_autoescape(),
    extensions=["jinja2.ext.i18n"],
    undefined=StrictUndefined,
)
_env.install_gettext_callables(i18n.gettext, i18n.ngettext, newstyle=True)  # type: ignore[attr-defined]
templates = Jinja2Templates(env=_env)


@pass_context
def path_for(context: dict[str, Any], name: str, /, **params: Any) -> str:
    """A root-relative URL (`/lessons/x`), so pages behave the same behind any proxy."""
    return _path(context["request"].app, name, tuple(sorted(params.items())))


@lru_cache(maxsize=4096)  # a page links dozens of URLs; starlette finds each by trying every route
def _path(app: Any, name: str, params: tuple[tuple[str, Any], ...]) -> str:
    return str(app.url_path_for(name, **dict(params)))


_rendered: dict[tuple, tuple[Markup, dict[str, Any]]] = {}


@pass_context
def once(context: dict[str, Any], name: str, /, **values: Any) -> Markup:
    """Template ``name`` rendered with ``values`` once per language, then reused: for the parts
    of a page that are the same for every visitor (a lesson's cards), so a request renders only
    what is its own. Objects in ``values`` count by identity: a reloaded course renders afresh."""
    lang = context["lang"]
    key = (
        name,
        lang,
        *((k, v if isinstance(v, str | int | None) else id(v)) for k, v in sorted(values.items())),
    )
    hit = _rendered.get(key)
    if hit is None:
        html = Markup(_env.get_template(name).render(request=context["request"], lang=lang, **values))
        if len(_rendered) >= 1024:  # authoring with reloads: old courses' fragments go
            _rendered.clear()
        _rendered[key] = hit = (html, values)  # holding the values keeps their ids theirs
    return hit[0]


@pass_context
def draft_owner(context: dict[str, Any]) -> str:
    """Whose drafts the page keeps in this browser: the account's, else this visitor's only (a
    digest: the visitor id itself stays in its HttpOnly cookie); none on a page answered before
    the visitor is known (the gate's 'busy' page)."""
    request = context["request"]
    if user := context.get("user"):
        return f"u{user.id}"
    visitor = getattr(request.state, "visitor_id", None)
    return "v" + hashlib.sha256(visitor.encode()).hexdigest()[:16] if visitor else ""


def status_label(status: str) -> str:
    """A submission status as the learner reads it."""
    labels = {
        "queued": _("Queued"),
        "running": _("Running"),
        "passed": _("Passed"),
        "failed": _("Not yet right"),
        "error": _("Did not finish"),  # an exception, a limit, or a run the grader could not judge
        "timeout": _("Took too long"),
        "rejected": _("Not accepted"),
        "cancelled": _("Cancelled"),
    }
    return labels.get(status, status)


templates.env.globals.update(
    path_for=path_for,
    once=once,
    langs=LANGS,
    language_name=i18n.language_name,
    number=i18n.number,
    status_label=status_label,
    draft_owner=draft_owner,
)


def render(
    request: Request, name: str, context: dict[str, Any] | None = None, *, status_code: int = 200
) -> Response:
    """Template `name` (a page, or an `_name.html` fragment for htmx) with what every template
    reads: the language, the user, the CSRF token and the page the learner is on."""
    auth = getattr(request.state, "auth", None)
    ctx = {
        "lang": request.state.lang,
        "user": auth.user if auth else None,
        "csrf_token": getattr(request.state, "csrf_token", ""),
        "here": here(request),
        **(context or {}),
    }
    was = request.cookies.get(LANG_WAS_COOKIE) if not name.startswith("_") else None
    if was and ctx["user"] and i18n.supported(was) not in (None, ctx["lang"]):
        # base.html says the account's language took over, once, and offers the one the learner
        # was reading back, in that language
        back = i18n.translations(was).gettext("Read it in %(language)s")
        ctx["lang_was"], ctx["lang_back"] = was, back % {"language": i18n.language_name(was)}
    response = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    response.headers.append("Vary", "HX-Request")  # routes answer htmx with a fragment
    if was:
        response.delete_cookie(LANG_WAS_COOKIE)
    return response


def choose_lang(request: Request, account_lang: str | None = None) -> tuple[str, bool]:
    """(language, whether to remember it in the cookie): ?lang=, then the signed-in account's,
    then the cookie, then Accept-Language."""
    if asked := i18n.supported(request.query_params.get("lang")):
        return asked, asked != request.cookies.get(LANG_COOKIE)
    remembered = i18n.supported(account_lang) or i18n.supported(request.cookies.get(LANG_COOKIE))
    return remembered or i18n.negotiate(request.headers.get("accept-language")) or LANGS[0], False
