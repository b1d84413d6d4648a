"""The web process never imports torch."""

import subprocess
import sys

from app.config import ROOT

SCRIPT = """
import sys
from fastapi.testclient import TestClient
from app.config import Settings
from app.db import upgrade
from app.main import create_app
settings = Settings(database_url="sqlite:///" + sys.argv[1], _env_file=None)
upgrade(settings.database_url)
with TestClient(create_app(settings)) as client:
    assert client.get("/lessons/gradient-accumulation").status_code == 200
    assert client.get("/api/lessons").status_code == 200
print("torch" in sys.modules)
"""


def test_serving_pages_does_not_import_torch(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "db.sqlite")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
