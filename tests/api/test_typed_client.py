"""A typed client generated from /openapi.json alone (openapi-python-client, as an app that syncs
with treino would make one) signs up, submits, polls the verdict and reads progress."""

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

GENERATOR = Path(sys.executable).with_name("openapi-python-client")


@pytest.fixture
def treino_client(tutor, tmp_path):
    """The generated package, importable as `treino_client` for this test only."""
    (tmp_path / "openapi.json").write_text(json.dumps(httpx2.get(f"{tutor.url}/openapi.json").json()))
    (tmp_path / "config.yaml").write_text("post_hooks: []\n")  # no formatter run: not needed to import
    generated = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(tmp_path / "openapi.json"),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / "gen" / "treino_client"),
            "--config",
            str(tmp_path / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "Warning" not in generated.stdout + generated.stderr, generated.stdout + generated.stderr
    sys.path.insert(0, str(tmp_path / "gen"))
    try:
        yield importlib.import_module("treino_client")
    finally:
        sys.path.remove(str(tmp_path / "gen"))
        for name in [m for m in sys.modules if m == "treino_client" or m.startswith("treino_client.")]:
            del sys.modules[name]


def test_a_generated_client_signs_up_submits_polls_a_verdict_and_reads_progress(tutor, treino_client):
    from treino_client import AuthenticatedClient, Client
    from treino_client.api.accounts import create_account, create_token, read_account
    from treino_client.api.progress import read_progress
    from treino_client.api.submissions import submission_api, submit_api
    from treino_client.models import (
        Credentials,
        ErrorOut,
        NewAccount,
        Status,
        SubmissionIn,
        SubmissionInMode,
        SubmissionOut,
        VerdictStatus,
    )

    email, password = "app@example.com", "four unrelated words here"
    with Client(base_url=tutor.url, raise_on_unexpected_status=True) as anonymous:
        created = create_account.sync_detailed(
            client=anonymous, body=NewAccount(email=email, password=password)
        )
        assert created.status_code == 201 and created.parsed.email == email
        again = create_account.sync_detailed(
            client=anonymous, body=NewAccount(email=email, password=password)
        )
        assert again.status_code == 409
        assert isinstance(again.parsed, ErrorOut) and again.parsed.code == "email_taken"
        token = create_token.sync(client=anonymous, body=Credentials(email=email, password=password)).token

    with AuthenticatedClient(base_url=tutor.url, token=token, raise_on_unexpected_status=True) as client:
        assert read_account.sync(client=client).email == email
        queued = submit_api.sync(
            slug="gradient-accumulation",
            exercise_slug="accumulate",
            client=client,
            body=SubmissionIn(code="def train(): pass\n", mode=SubmissionInMode.SUBMIT),
        )
        assert queued.status in (Status.QUEUED, Status.RUNNING, Status.PASSED)
        deadline = time.monotonic() + 30
        while True:
            submission = submission_api.sync(submission_id=queued.id, client=client)
            assert isinstance(submission, SubmissionOut)
            if submission.status not in (Status.QUEUED, Status.RUNNING):
                break
            assert time.monotonic() < deadline, "no verdict in 30 s"
            time.sleep(0.1)
        assert submission.status == Status.PASSED
        verdict = submission.verdict
        assert (verdict.version, verdict.exercise, verdict.status) == (
            1,
            "gradient-accumulation/accumulate",
            VerdictStatus.PASSED,
        )
        assert verdict.diagnosis is None and verdict.checks == []
        assert verdict.output == "def train(): pass\n"

        progress = read_progress.sync(client=client)
        assert progress.signed_in is True
        lesson = next(p for p in progress.lessons if p.lesson == "gradient-accumulation")
        assert lesson.exercises_passed == ["gradient-accumulation/accumulate"]

        missing = submission_api.sync_detailed(submission_id=queued.id + 1000, client=client)
        assert missing.status_code == 404
        assert isinstance(missing.parsed, ErrorOut) and missing.parsed.code == "not_found"
