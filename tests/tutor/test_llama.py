"""The tutor against a real OpenAI-compatible server: llama.cpp's, with SmolLM2-135M-Instruct
(`make tutor-deps`). The model is tiny: these assert the plumbing (an answer streams in pieces,
tokens and latency are counted, a stopped server is said plainly), not its wisdom."""

import time

import httpx2
import pytest

from app.tutor.models import TutorMessage
from bench.tutor_server import MODEL_ALIAS, llama_server
from tests.conftest import html
from tests.tutor.helpers import PAGE, STARTER_LIKE, ask


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server


def test_a_portuguese_question_is_answered_by_a_real_model_as_a_stream(make_client, llama):
    client = make_client(llama.url, tutor_model=MODEL_ALIAS, tutor_max_tokens=64)
    client.get(PAGE, params={"lang": "pt-BR"})
    started = time.monotonic()
    response, evs = ask(client, question="Por que o meu loop falha?", code=STARTER_LIKE)
    took = time.monotonic() - started
    assert response.status_code == 202
    kinds = [k for k, _ in evs]
    assert kinds[-1] in ("done", "withheld"), evs[-1]
    assert kinds.count("token") >= 2, "streamed in pieces"
    with client.app.state.sessionmaker() as session:
        row = session.get(TutorMessage, response.json()["id"])
        assert row.status in ("answered", "withheld") and row.content
        assert row.completion_tokens > 0 and row.prompt_tokens > 0 and row.first_token_ms is not None
        rate = row.completion_tokens / max(0.001, (row.duration_ms - row.first_token_ms) / 1000)
        print(  # the figures docs/tutor.md quotes: -s shows them
            f"\nSmolLM2-135M on llama.cpp: first token {row.first_token_ms} ms, "
            f"{row.completion_tokens} tokens in {took:.2f} s, "
            f"{rate:.1f} tokens/s "
            f"after the first (prompt {row.prompt_tokens} tokens)"
        )
    panel = html(client.get(PAGE)).select_one("#tutor")
    assert "Por que o meu loop falha?" in panel.get_text()
    metrics = client.get("/metrics").text
    assert "treino_tutor_reachable 1" in metrics and "treino_tutor_first_token_seconds_count 1" in metrics


def test_with_the_server_stopped_the_tutor_is_unavailable_and_the_page_works(make_client, tmp_path):
    with llama_server(tmp_path / "server.log") as server:
        client = make_client(server.url, tutor_model=MODEL_ALIAS, tutor_max_tokens=16)
        assert httpx2.get(server.url + "/models", timeout=10).status_code == 200  # it was up
    _, evs = ask(client)
    assert evs[-1][0] == "failed" and "unavailable" in evs[-1][1]["text"]
    assert client.get(PAGE).status_code == 200
