"""Request ids: one per request, kept from a proxy when sane, stored with the submission,
and written on every log line (JSON in production)."""

import json
import logging

from sqlalchemy import select

from app import logs
from app.submissions.models import Submission

API_URL = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"


def test_every_response_has_a_request_id_and_a_proxys_sane_one_is_kept(client):
    first, second = client.get("/healthz"), client.get("/healthz")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert (
        client.get("/healthz", headers={"X-Request-ID": "lb-1234abcd"}).headers["x-request-id"]
        == "lb-1234abcd"
    )
    forged = client.get("/healthz", headers={"X-Request-ID": "bad id\nwith newline"})
    assert forged.headers["x-request-id"] != "bad id\nwith newline"


def test_the_submission_keeps_the_id_of_the_request_that_made_it(client, app):
    response = client.post(API_URL, json={"code": "x"}, headers={"X-Request-ID": "trace-0001"})
    with app.state.sessionmaker() as session:
        row = session.scalar(select(Submission).where(Submission.id == response.json()["id"]))
    assert row.request_id == "trace-0001"


def test_json_log_lines_carry_the_bound_request_id(capsys):
    logs.setup("json")
    try:
        logs.bind("job-trace-42")
        logging.getLogger("treino.worker").info("job %s finished", 7)
    finally:
        logs.bind(None)
        logging.getLogger().handlers[:] = []
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["msg"] == "job 7 finished" and line["request_id"] == "job-trace-42"
    assert line["level"] == "info" and line["logger"] == "treino.worker"
