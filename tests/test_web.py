"""Pages rendered for every request: the error page in the visitor's language."""

from tests.conftest import html


def test_an_error_page_says_nothing_was_stored_only_where_something_was_sent(client):
    shown = html(client.get("/lessons/no-such-lesson")).select_one("main .lead").get_text(strip=True)
    assert "stored" not in shown
    response = client.post("/lessons/no-such-lesson/quiz/q1", data={"option": "a"})
    assert response.status_code == 404
    sent = html(response).select_one("main .lead").get_text(strip=True)
    assert sent.endswith("Nothing you sent was stored.")
    pt = client.post("/lessons/no-such-lesson/quiz/q1", params={"lang": "pt-BR"}, data={"option": "a"})
    assert (
        html(pt)
        .select_one("main .lead")
        .get_text(strip=True)
        .endswith("Nada do que você enviou foi guardado.")
    )
