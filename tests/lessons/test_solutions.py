"""A reference solution reads in the learner's language: beside solution.py (the one graded) an
exercise keeps solution.pt-BR.py, its comments and docstrings in Portuguese, shown to pt-BR
learners (app/submissions/present.solution). Both must be the same program, so one can never
teach what the other does not do (issue 44: the pt-BR solutions kept English comments)."""

import ast
import io
import tokenize
from pathlib import Path

import pytest

from contracts.languages import LANGS
from tests.conftest import LESSONS

SOLUTIONS = sorted(LESSONS.glob("*/exercises/*/solution.py"))
OTHER_LANGS = [lang for lang in LANGS if lang != "en"]


def _program(source: str) -> str:
    """The program without its docstrings (comments never reach the tree)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _prose(source: str) -> list[str]:
    """The comments and docstrings: what a reader reads as words."""
    comments = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    docstrings = [
        doc
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and (doc := ast.get_docstring(node))
    ]
    return comments + docstrings


@pytest.mark.parametrize("lang", OTHER_LANGS)
@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.parent.name)
def test_a_solution_with_words_has_them_in_each_language_and_is_the_same_program(solution: Path, lang: str):
    english = solution.read_text()
    translated = solution.with_name(f"solution.{lang}.py")
    if not _prose(english):
        assert not translated.exists(), "nothing to translate: solution.py serves every language"
        return
    assert translated.is_file(), f"{translated.name} is missing: its learners would read English comments"
    theirs = translated.read_text()
    assert _program(theirs) == _program(english), "not the same program as solution.py"
    left = set(_prose(english)) & set(_prose(theirs))
    assert not left, f"still in English: {sorted(left)}"
