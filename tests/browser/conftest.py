"""Browser tests: the real app (uvicorn, temp SQLite) and a real grading worker, driven by
Playwright through Debian's Chromium (never a downloaded browser). Screenshots of failures
land in test-results/."""

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.config import ROOT, Settings
from app.db import upgrade
from app.main import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RESULTS = ROOT / "test-results"
LESSONS = ROOT / "lessons"

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())


# the live servers' key, given outright: read from the environment, it changed under a running
# server when a fixture of another module set TREINO_SECRET_KEY, and a reset link signed in the
# test no longer matched the server's
SECRET_KEY = "browser-tests-own-secret-key"


def browser_settings(database_url: str, **overrides) -> Settings:
    """The settings of a live server over `database_url`: what a test that acts as the operator
    (minting a reset link, say) must build its own from."""
    # the whole browser suite is one classroom behind one address (127.0.0.1): past the default
    # 30 submissions in 10 minutes from it (or 4 anonymous jobs still waiting, some left running
    # by earlier tests), a late test's Submit was refused and its verdict never came; raised as
    # the README tells a classroom to
    values = {
        "database_url": database_url,
        "lessons_dir": LESSONS,
        "secret_key": SecretStr(SECRET_KEY),
        "submissions_per_ip": 10_000,
        "queued_per_client": 1_000,
    }
    return Settings(**(values | overrides), _env_file=None)


@contextmanager
def serving(database_url: str, poll_seconds: float = 0.3, **overrides) -> Iterator[str]:
    """The app on a free loopback port over ``database_url`` (migrated here), with a real worker
    grading in a thread (one warm sandbox: the next grade is quick); yields the base URL.
    ``overrides``: settings of the module's own (a limit made small to reach it)."""
    import uvicorn

    from worker.harness import quiet

    with quiet.ignored():
        import torch  # noqa: F401
    from worker.grading import Grader
    from worker.runner import Worker

    settings = browser_settings(database_url, poll_seconds=poll_seconds, **overrides)
    upgrade(settings.database_url)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    web = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    web.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    with (
        Grader.running(settings, pool_size=1) as grading,
        Worker(settings, grading.grade, isolation=grading.setup.isolation, device=grading.device) as worker,
    ):
        grader = threading.Thread(target=worker.run, name="worker", daemon=True)
        grader.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            worker.stop()
            grader.join(timeout=120)
            server.should_exit = True
            web.join(timeout=10)


@pytest.fixture(scope="module")
def live_database(tmp_path_factory) -> str:
    """The database behind live_server (a test reads it as the operator would, e.g. for the
    password-reset link `treino accounts reset-password` prints): each module's own, so no
    account, draft, limit or queue left by another module changes what its pages show."""
    return f"sqlite:///{tmp_path_factory.mktemp('browser') / 'treino.db'}"


@pytest.fixture(scope="module")
def live_server(live_database) -> Iterator[str]:
    """The app on a free loopback port, with a real worker grading in a thread; one per module."""
    with serving(live_database) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM:
        pytest.skip("no chromium on PATH (make system-deps installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]'")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def new_page(browser, live_server, request):
    """``new_page(**context_options)``: a page in a fresh browser context (its own visitor)."""
    pages = []

    def make(**options):
        context = browser.new_context(base_url=live_server, **options)
        context.set_default_timeout(20_000)
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.on("pageerror", lambda exc: pytest.fail(f"JavaScript error: {exc}"))
        pages.append(page)
        return page

    yield make
    failed = getattr(request.node, "rep_call", None)
    for i, page in enumerate(pages):
        if failed is not None and failed.failed:
            RESULTS.mkdir(exist_ok=True)
            page.screenshot(path=str(RESULTS / f"failed-{request.node.name}-{i}.png"), full_page=True)
        page.context.close()


def shot(page, name: str, element=None, *, full_page: bool = True) -> Path:
    """A screenshot kept for people to look at (test-results/ is git-ignored): the whole page, what
    the screen shows (full_page=False), or one element of it."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.png"
    if element is not None:
        element.screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=full_page)
    return path
