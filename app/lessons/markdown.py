"""Course text as HTML: Markdown (CommonMark and tables, raw HTML escaped) with code blocks
highlighted by Pygments, and Python source highlighted the same way. The web's alone: the
worker never renders anything."""

import html
from functools import cache
from typing import cast

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import PythonLexer, get_lexer_by_name
from pygments.util import ClassNotFound

_FORMATTER = HtmlFormatter(nowrap=True)


@cache
def _lexer(lang: str) -> Lexer:
    try:
        return get_lexer_by_name(lang or "text")
    except ClassNotFound:
        return get_lexer_by_name("text")


def _highlight(code: str, lang: str, _attrs: str) -> str:
    body = highlight(code, _lexer(lang), _FORMATTER)
    lang_class = html.escape(lang or "text")
    return f'<pre class="highlight" tabindex="0"><code class="language-{lang_class}">{body}</code></pre>'


_md = MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).enable("table")


# markdown-it types render() as Any since a renderer can be swapped; ours is its RendererHTML: str.
def render_markdown(text: str) -> str:
    return cast(str, _md.render(text))


def render_inline(text: str) -> str:
    return cast(str, _md.renderInline(text))


def python_html(code: str) -> str:
    """Python source highlighted as lesson code is (Pygments classes, no wrapper), its lines
    as given: no newline added at the end."""
    body = highlight(code, PythonLexer(stripnl=False), _FORMATTER)
    return body if code.endswith("\n") else body.removesuffix("\n")  # Pygments adds one
