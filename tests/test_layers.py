"""The shape of app/, read from the source with `ast`: what decides a question does so in one
place, and imports point one way."""

import ast
import json
import subprocess
import sys
from graphlib import TopologicalSorter
from pathlib import Path

import pytest

from app.config import ROOT

APP = ROOT / "app"


def _trees(root: Path = APP) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in root.rglob("*.py")}


def test_whether_a_request_is_the_apis_is_decided_only_by_is_api():
    """No `path.startswith("/api/")` of its own: is_api (app/http.py) answers for every module."""
    deciding = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _trees().items()
        if path != APP / "http.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "startswith"
        and any(isinstance(arg, ast.Constant) and str(arg.value).startswith("/api") for arg in node.args)
    ]
    assert deciding == []


DOMAINS = frozenset(path.parent.name for path in APP.glob("*/__init__.py"))
# every table in one place (Alembic, tests), and the wiring of routers and middleware
MAY_IMPORT_DOMAINS = frozenset({"models.py", "main.py"})


def _imported(tree: ast.AST, *, in_functions: bool = True) -> set[str]:
    """Every module `tree` imports (`from app import x` as app.x), also inside its functions
    unless told not to."""
    names: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not in_functions:
            continue
        names |= _imported(node, in_functions=in_functions)
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_no_base_module_of_app_imports_a_domain():
    assert {"accounts", "lessons", "submissions"} <= DOMAINS
    upward = {
        path.name: sorted(
            name for name in _imported(tree) if name.split(".")[:2] in [["app", domain] for domain in DOMAINS]
        )
        for path, tree in _trees().items()
        if path.parent == APP and path.name not in MAY_IMPORT_DOMAINS
    }
    assert {name: found for name, found in upward.items() if found} == {}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("package", ["contracts", "app", "worker"])
def test_the_modules_of_a_package_import_one_another_without_a_cycle(package):
    """Imports at the top of each module (those inside a function run later, and may point
    anywhere): graphlib's CycleError names the cycle."""
    trees = {_module(path): tree for path, tree in _trees(ROOT / package).items()}
    graph = {
        name: {
            imported
            for imported in _imported(tree, in_functions=False)
            if imported in trees and imported != name
        }
        for name, tree in trees.items()
    }
    assert list(TopologicalSorter(graph).static_order())


def test_the_domain_folders_of_app_import_one_another_without_a_cycle():
    """A folder of app/ is one node: an import anywhere in its modules, inside functions too, is
    an edge to the folder it names. A cycle (lessons → progress → lessons) fails, named."""
    graph: dict[str, set[str]] = {domain: set() for domain in DOMAINS}
    for path, tree in _trees().items():
        if path.parent == APP:
            continue
        domain = path.relative_to(APP).parts[0]
        for name in _imported(tree):
            parts = name.split(".")
            if parts[0] == "app" and len(parts) > 1 and parts[1] in DOMAINS and parts[1] != domain:
                graph[domain].add(parts[1])
    assert {"lessons", "progress", "submissions", "ops"} <= graph.keys()
    assert list(TopologicalSorter(graph).static_order())


HTTP_SIDE = frozenset({"routes.py", "auth.py", "dependencies.py", "schemas.py"})


def test_a_domains_services_know_nothing_of_http_and_leave_the_commit_to_the_request():
    """Only routes, auth (accounts), dependencies and schemas speak HTTP; the rest takes a
    Session and never commits it: the request's session does (app.db.get_session)."""
    found = {}
    for path, tree in _trees().items():
        if path.parent == APP or path.name in HTTP_SIDE:
            continue
        http = {name for name in _imported(tree) if name.split(".")[0] in ("fastapi", "starlette")}
        commits = {
            f"commit() at line {node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "commit"
        }
        if http | commits:
            found[str(path.relative_to(ROOT))] = sorted(http | commits)
    assert found == {}


# ---------------------------------------------------------------- contracts: what worker and web share

CONTRACTS = ROOT / "contracts"
# torch is the grader's, the rest the web's (HTTP, the database, rendering lesson text); app and
# worker are the two sides
NOT_FOR_CONTRACTS = frozenset(
    {
        "torch",
        "fastapi",
        "starlette",
        "sqlalchemy",
        "httpx",
        "httpx2",
        "uvicorn",
        "markdown_it",
        "pygments",
        "app",
        "worker",
    }
)


def test_contracts_import_neither_side_nor_torch_nor_http():
    """contracts/ is what both sides import (issue 27, point 6): it imports neither of them, nor
    what only one of them needs, also inside functions."""
    found = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imported(tree) if name.split(".")[0] in NOT_FOR_CONTRACTS
        )
        for path, tree in _trees(CONTRACTS).items()
    }
    assert {path: names for path, names in found.items() if names} == {}


def test_importing_every_contract_loads_neither_torch_nor_http():
    """What the modules import, followed all the way down, in a fresh interpreter."""
    loaded = _loaded_by(sorted(_module(path) for path in CONTRACTS.rglob("*.py")))
    assert sorted({name.split(".")[0] for name in loaded} & NOT_FOR_CONTRACTS) == []


def _loaded_by(modules: list[str]) -> list[str]:
    """Every module a fresh interpreter has loaded once it imported `modules`."""
    program = f"import sys, json\nfor m in {modules!r}: __import__(m)\nprint(json.dumps(sorted(sys.modules)))"
    return json.loads(
        subprocess.run(
            [sys.executable, "-c", program], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    )


# The worker's modules that may use the app (its settings, its database, its course): the command
# line and the runner (which takes its jobs through app/submissions/queue.py). Every other module
# of worker/ is the grading core (harness, checks, sandbox, fork server, pool, grading, seccomp,
# …): of the web's side, it imports contracts.
MAY_USE_THE_APP = frozenset({"worker/cli.py", "worker/runner.py"})


def _modules_imported(tree: ast.AST) -> set[str]:
    """The modules `tree` imports from, anywhere in it (`from app import x` as app.x)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= (
                {f"{node.module}.{a.name}" for a in node.names} if node.module == "app" else {node.module}
            )
    return found


def test_the_grading_core_imports_nothing_of_the_app_but_contracts():
    found = {
        (str(path.relative_to(ROOT)), name)
        for path, tree in _trees(ROOT / "worker").items()
        if str(path.relative_to(ROOT)) not in MAY_USE_THE_APP
        for name in _modules_imported(tree)
        if name.split(".")[0] == "app"
    }
    assert found == set(), "the grading core imports these from contracts/"


# The worker's processes: the runner (with its queue), the grader, the command line. None of
# them renders lesson text: what grading needs of an exercise is contracts/exercise.py's, and the
# course as pages (app/lessons/course.py, Markdown in app/lessons/markdown.py) is the web's.
# (Pygments itself comes with Alembic, whose templates app.db imports, so the renderer's own
# modules and Markdown are what is looked for.)
WORKER_PROCESSES = ["worker.runner", "app.submissions.queue", "worker.grading", "worker.cli"]
THE_RENDERER = ("markdown_it", "app.lessons.course", "app.lessons.markdown")


def test_the_worker_grades_without_the_lesson_renderer():
    loaded = _loaded_by(WORKER_PROCESSES)
    assert [name for name in loaded if name.split(".")[0] in THE_RENDERER or name in THE_RENDERER] == []
