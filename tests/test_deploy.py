"""The deployment files: the compose file is valid against the Compose specification's schema
(no Docker engine on CI), holds no secret, and runs the worker as bubblewrap expects."""

import shutil
import subprocess

import yaml

from app.config import ROOT

COMPOSE = ROOT / "docker-compose.yml"


def test_compose_file_validates_against_the_compose_spec():
    checker = shutil.which("check-jsonschema", path=str(ROOT / ".venv" / "bin")) or "check-jsonschema"
    result = subprocess.run(
        [checker, "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_has_no_default_secrets_and_reserves_a_gpu_for_the_worker():
    compose = yaml.safe_load(COMPOSE.read_text())
    env = compose["x-app-env"]
    assert env["TREINO_SECRET_KEY"].startswith("${TREINO_SECRET_KEY:?")
    assert "${POSTGRES_PASSWORD:?" in env["TREINO_DATABASE_URL"]
    services = compose["services"]
    assert set(services) == {"db", "migrate", "web", "worker"}
    [device] = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert services["worker"]["environment"]["TREINO_SANDBOX"] == "bwrap"
    assert "privileged" not in services["worker"] and "cap_add" not in services["worker"]
    assert services["web"]["command"][-1] == "--no-worker"


def test_env_example_leaves_every_secret_empty():
    values = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert values["TREINO_SECRET_KEY"] == "" and values["POSTGRES_PASSWORD"] == ""
