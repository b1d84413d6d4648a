from tests.conftest import html
from tests.tutor.helpers import PAGE, answer_text, ask


def test_smoke(make_client, endpoint):
    client = make_client(endpoint.url)
    page = html(client.get(PAGE))
    assert page.select_one("#tutor")
    response, evs = ask(client)
    assert response.status_code == 202, response.text
    assert answer_text(evs) == "Look at how the loss is scaled."
    assert evs[-1][0] == "done"
    page = html(client.get(PAGE))
    assert "how the loss is scaled" in page.select_one("#tutor").get_text()
