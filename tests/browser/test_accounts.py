"""Accounts in a real browser (issue 29, point 10): a reset link opened in a browser whose session
has ended shows the form (not "Your session has ended"), the reset signs the learner in, and once
the account is deleted, another browser signed in to it is told so plainly (not "Sign in again to
continue where you left off"); in both languages, 390 px and desktop, light and dark."""

from urllib.parse import urlencode

import pytest

from tests.browser.conftest import browser_settings, shot
from tests.browser.test_loop import overflow, too_wide

pytestmark = pytest.mark.browser

WORDS = {
    "en": {
        "reset_title": "Choose a new password",
        "ended": "Your session has ended",
        "account": "Your account",
        "changed": "Your password was changed. Every other device was signed out.",
        "signed_in_as": "Signed in as {email}.",
        "deleted_here": "Your account is deleted",
        "deleted_there": "The account this browser was signed in to has been deleted",
        "sign_in_again": "Sign in again to continue",
    },
    "pt-BR": {
        "reset_title": "Escolha uma nova senha",
        "ended": "Sua sessão terminou",
        "account": "Sua conta",
        "changed": "Sua senha foi trocada. Todos os outros dispositivos foram desconectados.",
        "signed_in_as": "Conectado como {email}.",
        "deleted_here": "A sua conta foi excluída",
        "deleted_there": "A conta em que este navegador estava conectado foi excluída",
        "sign_in_again": "Entre de novo para continuar",
    },
}
FIRST, SECOND, THIRD = (
    "four unrelated words here",
    "five other unrelated words",
    "six more unrelated words now",
)


def reset_path(database_url: str, email: str) -> str:
    """The link `treino accounts reset-password EMAIL` prints for the operator to hand on (its path:
    the live server's address is a free port, not TREINO_PUBLIC_URL)."""
    from sqlalchemy.orm import sessionmaker

    from app.accounts import lifecycle, service
    from app.db import make_engine

    settings = browser_settings(database_url)  # the live server's, so the same secret key
    engine = make_engine(settings.database_url)
    try:
        with sessionmaker(engine).begin() as session:
            user = service.find_user(session, email)
            assert user is not None, email
            token = lifecycle.reset_token(user, settings.secret_key.get_secret_value())
    finally:
        engine.dispose()
    return f"/reset-password?{urlencode({'token': token})}"


def submit(page, action: str, **fields: str) -> None:
    # the action's path, with or without a fragment (the delete form's brings its answer into view)
    form = page.locator(f"form:is([action='{action}'], [action^='{action}#'])")
    for name, value in fields.items():
        form.locator(f"input[name={name}]").fill(value)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()


def session_cookie(page) -> bool:
    return any(c["name"].endswith("treino_session") for c in page.context.cookies())


@pytest.mark.parametrize(("lang", "width", "scheme"), [("en", 390, "dark"), ("pt-BR", 1280, "light")])
def test_a_reset_link_works_over_an_ended_session_signs_in_and_a_deleted_account_is_named(
    new_page, live_database, lang, width, scheme
):
    """Page loads only (no grade): one representative per axis."""
    words = WORDS[lang]
    email = f"resetter-{lang.lower()}-{width}@example.com"
    # no service worker: its precache of the course, fetched with the cookie at its own moment,
    # would meet the ended session first and clear the cookie this test means the link to meet
    options = {
        "viewport": {"width": width, "height": 900},
        "color_scheme": scheme,
        "locale": lang,
        "service_workers": "block",
    }
    here, there = new_page(**options), new_page(**options)  # two browsers of one learner

    here.goto(f"/sign-up?lang={lang}")
    submit(here, "/sign-up", email=email, password=FIRST)
    there.goto(f"/sign-in?lang={lang}")
    submit(there, "/sign-in", email=email, password=FIRST)
    # the password is changed in the other browser: this one's session ends, its cookie stays
    there.goto("/account")
    submit(there, "/account/password", current_password=FIRST, new_password=SECOND)
    assert words["changed"] in there.locator(".notice").inner_text()
    assert session_cookie(here), "the browser still holds its (ended) session"

    # the reset link, opened over the ended session, shows the form
    here.goto(reset_path(live_database, email))
    assert here.url.split("?")[0].endswith("/reset-password"), here.url
    assert here.locator("h1").inner_text() == words["reset_title"]
    assert words["ended"] not in here.locator("main").inner_text()
    shot(here, f"reset-over-ended-session-{lang}-{scheme}-{width}", full_page=False)
    submit(here, "/reset-password", password=THIRD)
    # ... and, the password chosen, the learner is signed in
    assert here.url.endswith("/account?changed=1"), here.url
    assert here.locator("h1").inner_text() == words["account"]
    assert here.locator(".notice").inner_text() == words["changed"]
    assert words["signed_in_as"].format(email=email) in here.locator("main").inner_text()
    assert overflow(here) <= 0, too_wide(here)

    # the other browser signs in again with the new password; this one deletes the account
    there.goto(f"/sign-in?lang={lang}")
    submit(there, "/sign-in", email=email, password=THIRD)
    here.locator("details.delete-account summary").click()
    submit(here, "/account/delete", password=THIRD)
    assert here.locator("h1").inner_text() == words["deleted_here"]

    # the other browser is told plainly that the account was deleted
    there.goto("/account")
    notice = there.locator(".notice").inner_text()
    assert words["deleted_there"] in notice
    assert words["sign_in_again"] not in notice
    assert not session_cookie(there)
    assert overflow(there) <= 0, too_wide(there)
    shot(there, f"account-deleted-elsewhere-{lang}-{scheme}-{width}", full_page=False)
    # once told, the browser is a visitor's: the notice is not repeated
    there.goto("/account")
    assert words["deleted_there"] not in there.locator("main").inner_text()
