"""The deployment files: the compose file is valid against the Compose specification's schema
(no Docker engine on CI), holds no secret, runs the worker as bubblewrap expects, and puts a
proxy that reads each request whole in front of the web."""

import re
import shutil
import subprocess

import yaml

from app.config import ROOT, Settings

COMPOSE = ROOT / "docker-compose.yml"
NGINX = ROOT / "deploy" / "nginx.conf"


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
    assert set(services) == {"db", "migrate", "web", "proxy", "worker"}
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


def _directive(conf: str, name: str) -> str:
    [value] = re.findall(r"^\s*" + re.escape(name) + r"\s+([^;{]+);", conf, re.MULTILINE)
    return value.strip()


def test_the_web_is_reached_only_through_a_proxy_that_reads_requests_whole():
    """A slow client must never hold one of the web's places (issue 43): nginx is the only way
    in, it buffers each body before passing it on, and its limits are the app's."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert "ports" not in services["web"], "the web is reached through the proxy only"
    assert services["web"]["environment"]["TREINO_FORWARDED_ALLOW_IPS"] == "*"
    proxy = services["proxy"]
    assert proxy["ports"] and proxy["image"].startswith("nginx:")
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in proxy["volumes"]
    conf = NGINX.read_text()
    defaults = Settings(_env_file=None)
    assert _directive(conf, "proxy_request_buffering") == "on"
    assert _directive(conf, "client_max_body_size") == f"{defaults.max_body_bytes // 1024}k"
    for timeout in ("client_header_timeout", "client_body_timeout"):
        assert _directive(conf, timeout) == f"{defaults.request_seconds:g}s"
    # the client address the limits count by is the one nginx saw, never the client's own header
    assert _directive(conf, "proxy_set_header X-Forwarded-For") == "$remote_addr"
    assert _directive(conf, "server") == "web:8000"
