"""Installable and offline (issue 34) in Chromium: install criteria, reading a lesson opened
earlier with no network, answers, drafts and submissions made offline reaching the server once
after reconnecting, and a new release's lesson replacing the cached one. Playwright's offline
mode (context.set_offline) cuts the page and its service worker alike."""

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, func, select

from app.config import Settings
from app.db import upgrade
from app.drafts.models import Draft
from app.main import create_app
from app.offline import routes
from app.quizzes.models import QuizAttempt
from app.submissions.models import Submission
from tests.browser.conftest import LESSONS, _free_port, serving, shot
from tests.browser.test_accounts import FIRST, SECOND, submit
from tests.browser.test_learner_flow import GRADE_MS, SOLUTION, replace_code

pytestmark = pytest.mark.browser

LESSON = "/lessons/gradient-accumulation"
EXERCISE = f"{LESSON}/exercises/accumulate"

# resolves once a service worker controls the page (it claims the page when it activates)
CONTROLLED = """async () => {
  await navigator.serviceWorker.ready
  if (!navigator.serviceWorker.controller) {
    await new Promise((resolve) => navigator.serviceWorker.addEventListener("controllerchange", resolve))
  }
  return navigator.serviceWorker.controller.scriptURL
}"""
# resolves once the page the worker first took over is in its cache
KEPT = """async (url) => {
  for (let i = 0; i < 200; i++) {
    if (await caches.match(url, {ignoreVary: true})) return true
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return false
}"""


@pytest.fixture(scope="module")
def offline_server(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """The app with a grading worker over a database of these tests' own (they count its rows)."""
    db = tmp_path_factory.mktemp("offline") / "treino.db"
    url = f"sqlite:///{db}"
    with serving(url) as base:
        yield base, url


@pytest.fixture
def open_page(browser, offline_server, request):
    base, _url = offline_server
    contexts = []

    def make(**options):
        context = browser.new_context(base_url=base, **options)
        context.set_default_timeout(20_000)
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: pytest.fail(f"JavaScript error: {exc}"))
        return page

    yield make
    failed = getattr(request.node, "rep_call", None)
    for i, context in enumerate(contexts):
        if failed is not None and failed.failed:
            for j, page in enumerate(context.pages):
                shot(page, f"failed-{request.node.name}-{i}-{j}")
        context.close()


def rows(database_url: str, model, **where) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            query = select(func.count()).select_from(model)
            for name, value in where.items():
                query = query.where(getattr(model, name) == value)
            return connection.scalar(query) or 0
    finally:
        engine.dispose()


def controlled(page, path: str) -> None:
    """Open `path` and wait until the service worker controls it and has kept it."""
    page.goto(path)
    assert page.evaluate(CONTROLLED).endswith("/sw.js")
    assert page.evaluate(KEPT, page.url), "the first page is kept"


def outbox(page) -> list:
    return page.evaluate("() => JSON.parse(localStorage.getItem('treino:outbox') || '[]')")


def wait_empty_outbox(page) -> None:
    for _ in range(400):
        if not outbox(page):
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"the outbox was not sent: {outbox(page)}")


def test_install_criteria_manifest_worker_and_icons(open_page):
    page = open_page()
    controlled(page, "/?lang=pt-BR")
    href = page.locator('link[rel="manifest"]').get_attribute("href")
    manifest = page.evaluate("async (href) => (await fetch(href)).json()", href)
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"
    assert manifest["lang"] == "pt-BR"
    for icon in manifest["icons"]:
        size = page.evaluate(
            """async (src) => { const img = new Image(); img.src = src; await img.decode();
                                return `${img.naturalWidth}x${img.naturalHeight}` }""",
            icon["src"],
        )
        assert size == icon["sizes"], icon["src"]
    scope = page.evaluate("async () => (await navigator.serviceWorker.ready).scope")
    assert scope.endswith("/") and scope.count("/") == 3, "the whole tutor is the worker's scope"
    assert page.locator("[data-save-offline]").is_visible()


@pytest.mark.parametrize(("lang", "scheme"), [("en", "light"), ("pt-BR", "dark")])
def test_a_lesson_opened_earlier_reads_offline(open_page, lang, scheme):
    page = open_page(viewport={"width": 390, "height": 844}, color_scheme=scheme)
    controlled(page, f"{LESSON}?lang={lang}")
    title = page.locator("h1").first.inner_text()
    page.context.set_offline(True)
    page.reload()
    assert page.locator("h1").first.inner_text() == title
    assert page.locator("[data-offline-bar]").is_visible(), "the page says it is offline"
    colour = page.evaluate("getComputedStyle(document.querySelector('.site-header')).borderBottomStyle")
    assert colour == "solid", "app.css came from the cache too"
    shot(page, f"offline-lesson-{lang}-{scheme}", full_page=False)
    # a page never opened: the offline page, in the reader's language
    page.goto("/lessons/mixed-precision/exercises/amp-loop")
    expected = "You are offline" if lang == "en" else "Você está sem conexão"
    assert expected in page.locator("h1").inner_text()


def test_make_available_offline_saves_the_whole_course(open_page):
    page = open_page()
    controlled(page, "/")
    page.locator("[data-save-offline]").click()
    page.locator("[data-save-offline-state]", has_text="whole course").wait_for(timeout=60_000)
    page.context.set_offline(True)
    page.goto("/lessons/mixed-precision")
    assert "You are offline" not in page.locator("h1").first.inner_text()
    page.goto("/lessons/mixed-precision/exercises/amp-loop")
    page.locator(".cm-editor").wait_for()


# a tab whose outbox flush never starts (it waits for the Web Lock for ever): the other tab sends
NEVER_FLUSHES = "() => { navigator.locks.request = () => new Promise(() => {}) }"


@pytest.mark.parametrize("sender", ["this tab", "the other tab"])
def test_an_answer_given_offline_arrives_once(open_page, offline_server, sender):
    """Both tabs flush when the network returns; whichever sends it, the answer is stored once and
    the tab where it was given shows its feedback (a CI run saw it stay 'kept' when the other tab
    won the race)."""
    _base, database_url = offline_server
    page = open_page(viewport={"width": 390, "height": 844})
    controlled(page, LESSON)
    second = page.context.new_page()
    second.goto(LESSON)
    page.context.set_offline(True)
    form = page.locator("form.question").first
    form.locator("input[type=radio]").first.check()
    form.locator("button[type=submit]").click()
    queued = page.locator(".queued-offline")
    queued.wait_for()
    assert "kept in this browser" in queued.inner_text()
    assert len(outbox(page)) == 1
    key = outbox(page)[0]["key"]
    (second if sender == "this tab" else page).evaluate(NEVER_FLUSHES)
    page.context.set_offline(False)
    wait_empty_outbox(page)
    page.locator("form.question").first.locator(".feedback .verdict").wait_for()
    assert not page.locator(".queued-offline").count()
    if sender == "the other tab":
        second.locator("form.question").first.locator(".feedback .verdict").wait_for()
    assert rows(database_url, QuizAttempt, idempotency_key=key) == 1


def test_a_draft_written_offline_arrives_after_reconnecting(open_page, offline_server):
    _base, database_url = offline_server
    page = open_page()
    controlled(page, EXERCISE)
    page.locator(".cm-editor").wait_for()
    page.context.set_offline(True)
    code = "# written on a train\nx = 42\n"
    replace_code(page, code)
    page.locator("[data-draft-state]", has_text="not yet on the server").wait_for(timeout=15_000)
    page.context.set_offline(False)
    page.locator("[data-draft-state]", has_text="Draft saved").wait_for(timeout=15_000)
    assert rows(database_url, Draft, code=code) == 1
    page.reload()
    assert page.locator("textarea#code").input_value() == code


def test_a_draft_changed_on_two_devices_keeps_both(open_page):
    laptop = open_page()
    controlled(laptop, EXERCISE)
    laptop.locator(".cm-editor").wait_for()
    replace_code(laptop, "start = 0\n")
    laptop.locator("[data-draft-state]", has_text="Draft saved").wait_for(timeout=15_000)
    laptop.context.set_offline(True)
    replace_code(laptop, "mine = 1\n")
    laptop.locator("[data-draft-state]", has_text="not yet on the server").wait_for(timeout=15_000)
    # the same learner's other device (same cookies) saves meanwhile
    cookies = laptop.context.cookies()
    phone = laptop.context.browser.new_context(base_url=laptop.url.split("/lessons")[0])
    phone.add_cookies(cookies)
    token = laptop.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
    response = phone.request.put(
        f"{EXERCISE}/draft", data={"code": "theirs = 2\n"}, headers={"X-CSRF-Token": token}
    )
    assert response.status == 200, response.text()
    phone.close()
    laptop.context.set_offline(False)
    conflict = laptop.locator(".draft-conflict")
    conflict.wait_for(timeout=15_000)
    assert "Both are kept" in conflict.inner_text()
    conflict.locator("summary").click()
    assert conflict.locator("pre").inner_text().strip() == "theirs = 2"
    assert laptop.locator("textarea#code").input_value() == "mine = 1\n"


def test_a_submission_made_offline_is_graded_after_reconnecting(open_page, offline_server):
    _base, database_url = offline_server
    page = open_page(viewport={"width": 390, "height": 844}, color_scheme="dark")
    controlled(page, f"{EXERCISE}?lang=pt-BR")
    page.locator(".cm-editor").wait_for()
    replace_code(page, SOLUTION)
    page.context.set_offline(True)
    page.locator("button[name=mode][value=submit]").click()
    queued = page.locator("#submission-status .queued-offline")
    queued.wait_for()
    assert "avaliação quando a rede voltar" in queued.inner_text()
    shot(page, "offline-submit-pt-BR-dark", full_page=False)
    key = outbox(page)[0]["key"]
    page.context.set_offline(False)
    wait_empty_outbox(page)
    page.locator(".verdict-card.verdict-passed").wait_for(timeout=GRADE_MS)
    assert rows(database_url, Submission, idempotency_key=key) == 1


@contextmanager
def authoring_server(lessons) -> Iterator[str]:
    """The app over a copy of the lessons, hot-reloaded as an author's edits (a deploy) land; no
    grading worker."""
    import uvicorn

    db = lessons.parent / "treino.db"
    settings = Settings(
        database_url=f"sqlite:///{db}", lessons_dir=lessons, reload_lessons=True, _env_file=None
    )
    upgrade(settings.database_url)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_a_new_release_replaces_the_cached_lesson(browser, tmp_path):
    lessons = tmp_path / "lessons"
    shutil.copytree(LESSONS, lessons)
    source = lessons / "02-gradient-accumulation" / "lesson.en.md"
    with authoring_server(lessons) as base:
        context = browser.new_context(base_url=base)
        context.set_default_timeout(20_000)
        try:
            page = context.new_page()
            controlled(page, LESSON)
            old_title = page.locator("h1").first.inner_text()
            assert old_title != "Accumulate, released again"
            text = source.read_text()
            title_line = next(line for line in text.splitlines() if line.startswith("title:"))
            source.write_text(text.replace(title_line, 'title: "Accumulate, released again"', 1))
            page.goto(LESSON)  # online: the new release's page, and the new worker installs
            assert page.locator("h1").first.inner_text() == "Accumulate, released again"
            page.locator("[data-offline-notice]", has_text="updated").wait_for(timeout=30_000)
            context.set_offline(True)
            page.reload()
            assert page.locator("h1").first.inner_text() == "Accumulate, released again"
        finally:
            context.close()


# ------------------------------------------------------------------ whose pages (issue 43)

# the owner a kept page carries (X-Treino-Owner) once `want` holds: "*" any owner, None not kept;
# polls up to `ms` (a slow machine keeps a page late), and says what it found when it gave up
KEPT_OWNER = """async ([url, want, ms]) => {
  const deadline = performance.now() + ms
  for (;;) {
    const kept = await (await caches.open("treino-pages")).match(url, {ignoreVary: true})
    const owner = kept ? kept.headers.get("X-Treino-Owner") : null
    if (want === "*" ? owner !== null : owner === want) return owner
    if (performance.now() > deadline) return `gave up: ${owner}`
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}"""
OFFLINE_TITLE = {"en": "You are offline", "pt-BR": "Você está sem conexão"}
PHONE = {"width": 390, "height": 844}


def kept_owner(page, path: str, want: str | None = "*") -> str | None:
    """Wait until `path`'s kept copy is there ("*") or gone (None); its owner."""
    url = page.url.split("/", 3)[:3]
    return page.evaluate(KEPT_OWNER, ["/".join(url) + path, want, 30_000])


def owner_of(page) -> str:
    return page.locator("[data-offline-texts]").get_attribute("data-owner") or ""


def sign_up(page, email: str) -> None:
    page.goto("/sign-up")
    submit(page, "/sign-up", email=email, password=FIRST)
    assert owner_of(page).startswith("u"), "signed in"


def shows_offline_page(page, lang: str) -> None:
    """The page never saved for this browser's owner: the offline page, which names no one."""
    assert page.locator("h1").inner_text() == OFFLINE_TITLE[lang]
    assert not page.locator(".account-nav").count(), "no sign-in state claimed"


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_an_ended_sessions_pages_are_not_shown_to_the_next_person(open_page, lang):
    """Issue 43, class 4: A signs in on a shared computer; A's sessions end elsewhere (a password
    change on A's phone); B, at the same browser, is shown none of A's pages, offline or not,
    once any response has said the session ended; a tab still showing A's page leaves it."""
    email = f"shared-{lang.lower()}@example.com"
    page = open_page(viewport=PHONE, locale=lang)
    controlled(page, f"/?lang={lang}")
    sign_up(page, email)
    page.goto("/account")
    assert email in page.locator("main").inner_text()
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()
    draft = "# A's own work\nsecret = 1\n"
    replace_code(page, draft)
    saved = page.locator("textarea#code").get_attribute("data-draft-saved")
    page.locator("[data-draft-state]", has_text=saved).wait_for(timeout=15_000)
    page.goto(EXERCISE)  # kept again, A's draft in it
    assert page.locator("textarea#code").input_value() == draft
    owner_a = owner_of(page)
    assert kept_owner(page, "/account") == owner_a
    assert kept_owner(page, EXERCISE) == owner_a
    # A, offline: A's own pages are there (what follows is not the cache being empty)
    page.context.set_offline(True)
    page.goto("/account")
    assert email in page.locator(".account-email").inner_text()
    page.context.set_offline(False)
    other_tab = page.context.new_page()  # left open on A's draft
    other_tab.goto(EXERCISE)
    assert other_tab.locator("textarea#code").input_value() == draft

    # A's phone: the password changes, and every other session of A's ends
    phone = open_page(viewport=PHONE, locale=lang, service_workers="block")
    phone.goto("/sign-in")
    submit(phone, "/sign-in", email=email, password=FIRST)
    phone.goto("/account")
    submit(phone, "/account/password", current_password=FIRST, new_password=SECOND)

    # B sits down at the same browser, on a slow network: A's kept account page wins the race
    # after 4 s (nothing has said yet that A's session ended: the browser is still A's)...
    held = []

    def hold(route) -> None:  # the first answer waits for the test; any later one goes at once
        if held:
            route.continue_()
        else:
            held.append(route)

    page.context.route("**/account", hold)
    page.goto("/account")
    assert held, "the network's answer is held back"
    assert page.locator(".account-email").inner_text() == email
    # ... and the network's answer (the session ended: a redirect) takes it away
    held[0].continue_()
    page.wait_for_url("**/sign-in**")
    assert email not in page.content()
    owner_b = owner_of(page)
    assert owner_b.startswith("v") and owner_b != owner_a
    assert kept_owner(page, "/account", None) is None, "A's pages went"
    # the tab still showing A's draft loaded its page again: B's, without A's draft
    other_tab.wait_for_function(
        "(owner) => document.querySelector('[data-offline-texts]')?.dataset.owner === owner", arg=owner_b
    )
    other_tab.locator(".cm-editor").wait_for()
    assert "secret = 1" not in other_tab.locator("textarea#code").input_value()
    assert email not in other_tab.content()
    assert kept_owner(page, EXERCISE) == owner_b, "kept again, as B's"

    page.context.set_offline(True)
    page.goto("/account")
    shows_offline_page(page, lang)
    assert email not in page.content()
    shot(page, f"offline-shared-computer-{lang}", full_page=False)
    page.goto(EXERCISE)  # B's own copy, kept when the other tab loaded it again
    page.locator(".cm-editor").wait_for()
    assert "secret = 1" not in page.locator("textarea#code").input_value()
    assert email not in page.content()


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_a_page_never_saved_leaves_the_saved_course_and_the_sign_in_alone(open_page, lang):
    """Issue 43, class 5: the offline page was kept while a visitor's; signed in since, with the
    course saved, a learner offline opens a page never saved (a mistyped address): it names no
    one, and every saved page still opens, signed in, after it."""
    email = f"saved-course-{lang.lower()}@example.com"
    page = open_page(viewport=PHONE, locale=lang)
    controlled(page, f"/?lang={lang}")  # the worker installs, and keeps the offline page, now
    sign_up(page, email)
    saved = page.locator("[data-offline-texts]").get_attribute("data-saved")
    page.locator("[data-save-offline]").click()
    page.locator("[data-save-offline-state]", has_text=saved).wait_for(timeout=60_000)
    assert kept_owner(page, LESSON) == owner_of(page)

    page.context.set_offline(True)
    page.goto("/lessons/gradient-acumulation")  # mistyped
    shows_offline_page(page, lang)
    assert email not in page.content()
    page.evaluate(CONTROLLED)  # its script has met the worker
    shot(page, f"offline-page-signed-in-{lang}", full_page=False)
    page.goto(LESSON)
    assert page.locator("h1").first.inner_text() != OFFLINE_TITLE[lang], "lesson 2 is still saved"
    assert page.locator(".account-email").inner_text() == email, "still signed in"
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()


def outbox_keys(page) -> list[str]:
    return [item["key"] for item in outbox(page)]


def test_the_outbox_sends_an_item_only_under_whoever_queued_it(open_page, offline_server):
    """Issue 43, class 6: a visitor's answer given offline goes to the account the same visitor
    signs up for in this tab (as the server adopts the visitor's rows then); an item another
    visitor of this browser left is never sent under that account, and waits for its owner."""
    _base, database_url = offline_server
    page = open_page(viewport=PHONE)
    controlled(page, LESSON)
    visitor = owner_of(page)
    # the network comes back, but the outbox cannot send before the sign-up (its session check fails)
    page.context.route("**/offline/session", lambda route: route.abort())
    page.context.set_offline(True)
    form = page.locator("form.question").first
    form.locator("input[type=radio]").first.check()
    form.locator("button[type=submit]").click()
    page.locator(".queued-offline").wait_for()
    [mine] = outbox(page)
    assert mine["owner"] == visitor
    theirs = {**mine, "key": "another-visitors-key-0001", "owner": "v" + "0" * 16}
    page.evaluate(
        "(item) => localStorage.setItem('treino:outbox', JSON.stringify([...JSON.parse("
        "localStorage.getItem('treino:outbox')), item]))",
        theirs,
    )
    page.context.set_offline(False)
    page.goto("/sign-up")
    assert outbox_keys(page) == [mine["key"], theirs["key"]], "nothing sent yet"
    page.context.unroute("**/offline/session")
    submit(page, "/sign-up", email="outbox-owner@example.com", password=FIRST)
    account = owner_of(page)
    assert account.startswith("u")
    for _ in range(400):  # the page after the sign-up sends the visitor's item, now the account's
        if outbox_keys(page) == [theirs["key"]]:
            break
        page.wait_for_timeout(50)
    assert outbox_keys(page) == [theirs["key"]], outbox(page)
    assert rows(database_url, QuizAttempt, idempotency_key=mine["key"]) == 1
    assert rows(database_url, QuizAttempt, idempotency_key=mine["key"], user_id=None) == 0, "the account's"
    # sent again on purpose: the other visitor's item stays unsent, kept for its owner
    page.evaluate("async () => (await import('/static/js/offline.js')).flush()")
    assert outbox(page) == [theirs]
    assert rows(database_url, QuizAttempt, idempotency_key=theirs["key"]) == 0


# ------------------------------------------------------------------ the page cache's bound (issue 47)

KEPT_PATHS = """async () => (await (await caches.open("treino-pages")).keys())
  .map((request) => new URL(request.url).pathname)"""


def test_the_page_cache_keeps_at_most_its_bound_the_oldest_going_first(open_page, monkeypatch):
    monkeypatch.setattr(routes, "MAX_PAGES", 3)  # written into /sw.js, which this browser fetches now
    page = open_page()
    controlled(page, "/")
    lessons = [f"/lessons/{slug}" for slug in ("mixed-precision", "gradient-accumulation", "bottleneck")]
    lessons += ["/lessons/gpu-memory", "/lessons/model-memory"]
    for path in lessons:
        page.goto(path)
        assert kept_owner(page, path) == owner_of(page)
    assert page.evaluate(KEPT_PATHS) == lessons[-3:]
    # a page read again is kept again, as the newest: the next one to go is another
    page.goto(lessons[2])
    page.goto(lessons[1])
    assert kept_owner(page, lessons[1]) == owner_of(page)
    assert page.evaluate(KEPT_PATHS) == [lessons[4], lessons[2], lessons[1]]
    page.context.set_offline(True)
    page.goto(lessons[3])
    assert page.locator("h1").inner_text() == OFFLINE_TITLE["en"]
    page.goto(lessons[4])
    assert page.locator("h1").first.inner_text() != OFFLINE_TITLE["en"]
