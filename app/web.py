"""Templating: one render() for pages and their htmx fragments, and the visitor's language."""

from typing import Any

from jinja2 import (
    Environment,
    FileSystemLoader,
    StrictUndefined,
    pass_context,
    select_autoescape,
)
from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.requests import Request
from starlette.responses import Response

from app import i18n
from app.config import LANGS, ROOT

LANG_COOKIE = "treino_lang"

_env = Environment(loader=FileSystemLoader(ROOT / "templates"), autoescape=select_autoescape(),
                   extensions=["jinja2.ext.i18n"], undefined=StrictUndefined)
_env.install_gettext_callables(i18n.gettext, i18n.ngettext, newstyle=True)  # type: ignore[attr-defined]
templates = Jinja2Blocks(env=_env)


@pass_context
def path_for(context: dict[str, Any], name: str, /, **params: Any) -> str:
    """A root-relative URL (`/lessons/x`), so pages behave the same behind any proxy."""
    return str(context["request"].app.url_path_for(name, **params))


templates.env.globals.update(
    path_for=path_for, langs=LANGS, language_name=i18n.language_name, number=i18n.number
)


def is_htmx(request: Request) -> bool:
    return (request.headers.get("HX-Request") == "true"
            and request.headers.get("HX-History-Restore-Request") != "true")


def render(request: Request, name: str, context: dict[str, Any] | None = None, *,
           block: str | None = None, status_code: int = 200) -> Response:
    """A whole page, or one named block of it when htmx asks for a fragment."""
    ctx = {"lang": request.state.lang, **(context or {})}
    if block and is_htmx(request):
        response = templates.TemplateResponse(request, name, ctx, block_name=block,
                                              status_code=status_code)
    else:
        response = templates.TemplateResponse(request, name, ctx, status_code=status_code)
    response.headers.append("Vary", "HX-Request")
    return response


def choose_lang(request: Request) -> tuple[str, bool]:
    """(language, whether to remember it): ?lang=, then the cookie, then Accept-Language."""
    if asked := i18n.supported(request.query_params.get("lang")):
        return asked, asked != request.cookies.get(LANG_COOKIE)
    remembered = i18n.supported(request.cookies.get(LANG_COOKIE))
    return remembered or i18n.negotiate(request.headers.get("accept-language")) or LANGS[0], False
