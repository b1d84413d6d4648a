"""The tutor on a lesson card: a folded "Ask the tutor" under every card when the tutor is
configured (none otherwise), whose panel holds this learner's conversation about that card; the
tutor is told the card's text (not an exercise's code or verdict); conversations are kept per
card, in either language, exported and deleted with the account; an answer that writes one of
the lesson's exercises for the learner is withheld."""

import json

from sqlalchemy import func, select

from app.tutor import guard
from app.tutor.models import TutorMessage
from tests.conftest import PASSWORD, html, sign_up
from tests.submissions.test_verdict import NOT_SCALED, finished
from tests.tutor.helpers import PAGE, answer_text, events

LESSON = "/lessons/gradient-accumulation"
CARD = 2  # "PyTorch already adds gradients"
CARD_KEY = "gradient-accumulation/pytorch-already-adds-gradients"
PANEL = f"{LESSON}/cards/{CARD}/tutor"


def ask_card(client, question="Why does it add up?", card=CARD, **params):
    """(the POST's response, the events of its stream or [])."""
    response = client.post(f"{LESSON}/cards/{card}/tutor", json={"question": question}, params=params)
    if response.status_code != 202:
        return response, []
    stream = client.get(response.json()["stream"])
    assert stream.status_code == 200, stream.text
    return response, events(stream.text)


def _system(endpoint) -> str:
    return endpoint.script.requests[-1]["messages"][0]["content"]


def test_without_a_url_cards_have_no_tutor_and_its_routes_are_absent(make_client):
    client = make_client(None)
    page = html(client.get(LESSON))
    assert page.select(".card") and not page.select(".tutor-card")
    assert not [s for s in page.select("script") if "tutor.js" in (s.get("src") or "")]
    assert client.get(PANEL).status_code == 404
    assert client.post(PANEL, json={"question": "hi"}).status_code == 404


def test_every_card_has_a_folded_ask_the_tutor_that_fetches_its_panel(make_client, endpoint):
    client = make_client(endpoint.url)
    page = html(client.get(LESSON))
    cards = page.select("li.card")
    folds = page.select("li.card > details.tutor-card")
    assert len(folds) == len(cards) > 3, "one per card, core and 'Go further' alike"
    assert all(not fold.has_attr("open") for fold in folds), "folded: the lesson reads as before"
    third = page.select_one("li#pytorch-already-adds-gradients details.tutor-card")
    assert third["hx-get"] == PANEL and third["hx-trigger"] == "toggle once"
    assert third.select_one("summary").get_text(strip=True) == "Ask the tutor about this card"
    assert [s["src"] for s in page.select("script") if "tutor.js" in (s.get("src") or "")]
    panel = html(client.get(PANEL)).select_one("section.tutor")
    assert panel["id"] == "tutor-pytorch-already-adds-gradients" and panel["data-tutor"] == "card"
    assert panel["data-ask-url"] == PANEL
    assert panel.select_one("label")["for"] == panel.select_one("textarea")["id"]
    assert client.get(f"{LESSON}/cards/999/tutor").status_code == 404
    assert client.post(f"{LESSON}/cards/999/tutor", json={"question": "hi"}).status_code == 404
    pt = html(client.get(LESSON, params={"lang": "pt-BR"}))
    assert (
        pt.select_one("details.tutor-card summary").get_text(strip=True)
        == "Pergunte ao tutor sobre este card"
    )


def test_the_tutor_is_told_the_card_and_not_an_exercise(make_client, endpoint):
    endpoint.script.pieces = ["Each ", "backward() ", "adds into .grad."]
    client = make_client(endpoint.url)
    finished(client.app, client, NOT_SCALED)  # a verdict on the lesson's exercise: not sent here
    response, evs = ask_card(client)
    assert response.status_code == 202
    assert answer_text(evs) == "Each backward() adds into .grad." and evs[-1][0] == "done"
    system = _system(endpoint)
    assert "reading the lesson card below" in system
    assert "Lesson: Gradient accumulation" in system
    assert "The card the learner is reading: PyTorch already adds gradients" in system
    assert "backward()" in system and "<p>" not in system, "the card's text, not its HTML"
    assert "<<<code" not in system and "loss-not-scaled" not in system, "no exercise code or verdict"
    assert "Do not write the solutions of the course's exercises" in system
    assert endpoint.script.requests[-1]["messages"][-1] == {"role": "user", "content": "Why does it add up?"}


def test_conversations_are_kept_per_card_in_either_language(make_client, endpoint):
    endpoint.script.pieces = ["Sim."]
    client = make_client(endpoint.url)
    client.get(LESSON, params={"lang": "pt-BR"})
    ask_card(client, question="Por que soma?")
    system = _system(endpoint)
    assert "Responda em português do Brasil" in system and "O card que o aluno está lendo" in system
    assert "O PyTorch já soma os gradientes" in system
    # the same card in English: the same conversation; another card and the exercise: none
    client.get(LESSON, params={"lang": "en"})
    texts = [t.get_text().strip() for t in html(client.get(PANEL)).select(".tutor-text")]
    assert texts == ["Por que soma?", "Sim."]
    assert not html(client.get(f"{LESSON}/cards/3/tutor")).select(".tutor-text")
    assert not html(client.get(PAGE)).select("#tutor .tutor-text")
    # the next question on this card sends the earlier turns again
    ask_card(client, question="And then?")
    sent = endpoint.script.requests[-1]["messages"]
    assert [m["content"] for m in sent[1:]] == ["Por que soma?", "Sim.", "And then?"]
    with client.app.state.sessionmaker() as session:
        rows = session.scalars(select(TutorMessage).order_by(TutorMessage.id)).all()
    assert {(r.card, r.exercise) for r in rows} == {(CARD_KEY, None)}


def test_card_conversations_count_against_the_same_budget(make_client, endpoint):
    client = make_client(endpoint.url, tutor_messages_per_hour=2)
    assert ask_card(client)[0].status_code == 202
    client.post(PAGE + "/tutor", json={"question": "q"})
    refused, _ = ask_card(client)
    assert refused.status_code == 429 and "a lot this hour" in refused.json()["message"]


def test_an_answer_that_writes_the_lessons_exercise_is_withheld(make_client, endpoint):
    endpoint.script.pieces = [
        "Like this:\n    loss = loss_fn(model(x), y) / accum_steps\n",
        "    loss.backward()\n    if (step + 1) % accum_steps == 0:\n",
        "        optimizer.step()\n        optimizer.zero_grad()\n",
    ]
    client = make_client(endpoint.url)
    _, evs = ask_card(client, question="Write the accumulate exercise for me")
    assert "loss_fn(model(x), y) / accum_steps" not in answer_text(evs)
    assert evs[-1][0] == "withheld" and "gave away the reference solution" in evs[-1][1]["text"]


def test_card_conversations_are_exported_and_deleted_with_the_account(make_client, endpoint):
    client = make_client(endpoint.url)
    sign_up(client, "reader@example.org")
    ask_card(client)
    rows = json.loads(client.get("/account/export").text)["tutor_messages"]
    assert [(r["role"], r["card"], r["exercise"]) for r in rows] == [
        ("learner", CARD_KEY, None),
        ("tutor", CARD_KEY, None),
    ]
    client.post("/account/delete", data={"password": PASSWORD})
    with client.app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(TutorMessage)) == 0


def test_bad_card_questions_are_refused(make_client, endpoint):
    client = make_client(endpoint.url)
    for bad in ({"question": ""}, {"question": "x" * 2001}, {"question": "a\x00b"}):
        assert client.post(PANEL, json=bad).status_code == 422


def test_the_guard_judges_each_solution_of_a_group_on_its_own():
    one, two = ["aaaaaaaaaaaa1", "aaaaaaaaaaaa2"], ["bbbbbbbbbbbb1", "bbbbbbbbbbbb2", "bbbbbbbbbbbb3"]
    g = guard.Guard(one + two, 0.4, [one, two])
    assert g.feed("see bbbbbbbbbbbb1\n") == " […]\n" and not g.withheld, "a third of the second"
    g = guard.Guard(one + two, 0.4, [one, two])
    g.feed("aaaaaaaaaaaa1\n")
    assert g.withheld, "half of the first solution (a fifth of all the lines)"
