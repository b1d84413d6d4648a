"""Asking the tutor the way tutor.js does: the question, then the answer's event stream."""

import json

from tests.conftest import LESSONS

EXERCISE = "gradient-accumulation/accumulate"
PAGE = "/lessons/gradient-accumulation/exercises/accumulate"
ASK = PAGE + "/tutor"
# a wrong loop of the course's own (the loss not divided by accum_steps)
MISTAKES = LESSONS / "02-gradient-accumulation/exercises/accumulate/mistakes"
STARTER_LIKE = (MISTAKES / "loss-not-scaled.py").read_text()


def events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.split("\n\n"):
        kind, data = "message", ""
        for line in block.splitlines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
        if data:
            out.append((kind, json.loads(data)))
    return out


def ask(client, question="Why does my loop fail?", code=STARTER_LIKE, hints=0, **params):
    """(the POST's response, the events of the stream or [])."""
    response = client.post(ASK, json={"question": question, "code": code, "hints": hints}, params=params)
    if response.status_code != 202:
        return response, []
    stream = client.get(response.json()["stream"])
    assert stream.status_code == 200, stream.text
    assert stream.headers["content-type"].startswith("text/event-stream")
    return response, events(stream.text)


def answer_text(evs: list[tuple[str, dict]]) -> str:
    return "".join(d["text"] for k, d in evs if k == "token")
