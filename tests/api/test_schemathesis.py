"""The API's contract is its OpenAPI document: Schemathesis, an independent client, generates
requests from /openapi.json (its examples, boundary values, random inputs and sequences of
calls) against a running tutor and checks every answer against the document."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
# Fixed, so that a failure can be replayed; TREINO_SCHEMATHESIS_SEED=n searches elsewhere.
SEED = int(os.environ.get("TREINO_SCHEMATHESIS_SEED", "20"))
MAX_EXAMPLES = 12


def test_schemathesis_finds_nothing(tutor, tmp_path):
    tokens = [tutor.api_token("schemathesis@example.com") for _ in range(40)]
    stats = tmp_path / "sent.json"
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "TREINO_TEST_TOKENS": json.dumps(tokens),
        "TREINO_TEST_STATS": str(stats),
        "NO_COLOR": "1",
        "COLUMNS": "120",
        "PYTHONPATH": str(HERE.parent.parent),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(HERE / "schemathesis.toml"),
            "run",
            f"{tutor.url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--request-timeout",
            "10",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )  # its caches go there
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    summary = output[output.rfind("SUMMARY") :]
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, summary  # every phase ran and passed
    sent = json.loads(stats.read_text())
    assert sent["nul"] and sent["lone_surrogate"] and sent["huge_id"], sent
