"""A learner in Chromium asks the AI tutor, in Portuguese, why their failing accumulate loop
fails, and sees the answer stream in beside the verdict; with the tutor's server stopped the
panel says it is unavailable and the rest of the page goes on working. On a phone, a reader asks
about a lesson card in the card's own folded panel."""

import re

import pytest

from bench.tutor_server import MODEL_ALIAS, llama_server
from tests.browser.conftest import serving
from tests.browser.test_learner_flow import replace_code

MISTAKE = "lessons/02-gradient-accumulation/exercises/accumulate/mistakes/loss-not-scaled.py"
PAGE = "/lessons/gradient-accumulation/exercises/accumulate?lang=pt-BR"

pytestmark = pytest.mark.browser

# what the panel says of an answer the model stopped at its length limit
CUT = {
    "en": "The answer reached its length limit and stops there. Ask a follow-up to read the rest.",
    "pt-BR": "A resposta atingiu o limite de tamanho e parou aqui. Faça outra pergunta para ler o resto.",
}


@pytest.fixture(scope="module")
def tutor_site(tmp_path_factory):
    """The app with its tutor pointed at a real llama.cpp server, and that server."""
    tmp = tmp_path_factory.mktemp("tutor-browser")
    with llama_server(tmp / "llama.log") as llama, pytest.MonkeyPatch.context() as env:
        env.setenv("TREINO_TUTOR_URL", llama.url)
        env.setenv("TREINO_TUTOR_MODEL", MODEL_ALIAS)
        env.setenv("TREINO_TUTOR_MAX_TOKENS", "96")
        with serving(f"sqlite:///{tmp / 'treino.db'}") as url:
            yield url, llama


def test_on_a_phone_a_reader_asks_about_a_card_and_finds_the_answer_again(browser, tutor_site):
    """At 390 px: a card's folded "Ask the tutor" opens its panel in place, the answer streams in,
    nothing overflows the screen; back on the lesson, that card's conversation is there again and
    another card's is empty. (Runs before the next test, which stops the model's server.)"""
    url, _llama = tutor_site
    context = browser.new_context(base_url=url, viewport={"width": 390, "height": 800})
    context.set_default_timeout(60_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/lessons/gradient-accumulation")
    card = page.locator("li#pytorch-already-adds-gradients")
    fold = card.locator("details.tutor-card")
    assert not fold.locator(".tutor").count(), "nothing fetched before it is opened"
    fold.locator("summary").click()
    panel = card.locator("#tutor-pytorch-already-adds-gradients")
    panel.wait_for()
    panel.get_by_label("Your question").fill("Why do gradients add up?")
    panel.get_by_role("button", name="Ask").click()
    state = panel.locator("[data-tutor-state]")
    state.filter(has_text=re.compile("The tutor answered|length limit|unavailable")).wait_for(timeout=120_000)
    # whole, or cut at TREINO_TUTOR_MAX_TOKENS (96 here), which the page then says
    assert state.inner_text() in ("The tutor answered.", CUT["en"])
    assert panel.locator(".tutor-tutor .tutor-text").last.inner_text().strip()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, "nothing wider than the phone"
    box = panel.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390

    page.reload()
    card.locator("details.tutor-card summary").click()
    panel.locator(".tutor-text").first.wait_for()
    texts = panel.locator(".tutor-text").all_inner_texts()
    assert len(texts) == 2 and texts[0] == "Why do gradients add up?"
    other = page.locator("li#choose-accum-steps")
    other.locator("details.tutor-card summary").click()
    other.locator("section.tutor").wait_for()
    assert other.locator(".tutor-text").count() == 0, "each card has its own conversation"
    assert not errors, errors
    context.close()


def test_a_learner_asks_in_portuguese_and_sees_the_answer_stream_in(browser, tutor_site):
    url, llama = tutor_site
    from tests.browser.conftest import ROOT

    context = browser.new_context(base_url=url)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    context.set_default_timeout(60_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(PAGE)
    code = (ROOT / MISTAKE).read_text()
    replace_code(page, code)
    page.get_by_role("button", name=re.compile("^Enviar")).click()
    page.locator(".verdict-card").wait_for(timeout=120_000)
    panel = page.locator("#tutor")
    assert panel.locator("h2").inner_text() == "Pergunte ao tutor"
    # snapshots of the answer while it is written: it grows
    seen = []
    page.expose_function("seen", lambda text: seen.append(text))
    page.evaluate(
        "() => new MutationObserver(() => {"
        " const t = document.querySelectorAll('#tutor .tutor-tutor .tutor-text');"
        " if (t.length) window.seen(t[t.length - 1].textContent) })"
        ".observe(document.querySelector('#tutor'), {subtree: true, childList: true, characterData: true})"
    )
    panel.get_by_label("Sua pergunta").fill("Por que o meu loop falha?")
    panel.get_by_role("button", name="Perguntar").click()
    state = panel.locator("[data-tutor-state]")
    ended = re.compile("O tutor respondeu|limite de tamanho|indisponível")
    state.filter(has_text=ended).wait_for(timeout=120_000)
    assert state.inner_text() in ("O tutor respondeu.", CUT["pt-BR"])
    answer = panel.locator(".tutor-tutor .tutor-text").last.inner_text()
    assert answer.strip()
    lengths = sorted({len(s) for s in seen if s})
    assert len(lengths) >= 3, f"the answer came in one piece: {lengths}"
    # beside the verdict: the panel is on screen with it, in the same column
    assert page.locator(".verdict-card").is_visible() and panel.is_visible()

    llama.stop()  # the tutor's server goes away
    from app.tutor import client as tutor_client

    tutor_client.forget_probes()
    panel.get_by_label("Sua pergunta").fill("E agora?")
    panel.get_by_role("button", name="Perguntar").click()
    state.filter(has_text="indisponível").wait_for(timeout=60_000)
    assert "O tutor está indisponível no momento" in panel.locator(".tutor-failed").last.inner_text()
    # nothing else broke: the editor still holds the code, hints still open, the verdict stays
    assert "loss_fn" in page.locator("textarea#code").input_value()
    page.locator(".hint-next").click()
    page.locator("#hint-1").wait_for()
    assert page.locator(".verdict-card").is_visible()
    assert not errors, errors
    context.close()
