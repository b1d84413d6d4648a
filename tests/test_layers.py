"""The shape of app/, read from the source with `ast`: what decides a question does so in one
place, and imports point one way."""

import ast
from pathlib import Path

from app.config import ROOT

APP = ROOT / "app"


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in APP.rglob("*.py")}


def test_whether_a_request_is_the_apis_is_decided_only_by_is_api():
    """No `path.startswith("/api/")` of its own: is_api (app/http.py) answers for every module."""
    deciding = [f"{path.relative_to(ROOT)}:{node.lineno}"
                for path, tree in _trees().items() if path != APP / "http.py"
                for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "startswith"
                and any(isinstance(arg, ast.Constant) and str(arg.value).startswith("/api")
                        for arg in node.args)]
    assert deciding == []
