"""Settings, read once from the environment (prefix TREINO_)."""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
LANGS = ("en", "pt-BR")
DEFAULT_LANG = "en"
DEV_SECRET = "dev-only-not-secret"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TREINO_", env_file=".env", extra="ignore")

    env: Literal["development", "production"] = "development"
    database_url: str = f"sqlite:///{ROOT / 'var' / 'treino.db'}"
    secret_key: SecretStr = SecretStr(DEV_SECRET)
    lessons_dir: Path = ROOT / "lessons"
    # Learner code runs in bubblewrap (auto: when it works here; bwrap: refuse to start without
    # it; process: never, the code is not isolated), on this device (cuda: refuse without one),
    # with this many warm sandboxes (torch already imported) waiting; 0: every job starts cold.
    sandbox: Literal["auto", "bwrap", "process"] = "auto"
    # How a job's sandbox starts: fork (a fork of a template that imported torch once, entering
    # namespaces of its own: milliseconds; where forking cannot work, exec instead) or exec (a
    # single-use sandbox from the warm pool, each its own interpreter and torch import).
    sandbox_start: Literal["fork", "exec"] = "fork"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    pool_size: int = Field(default=2, ge=0, le=16)
    # Database connections each web process keeps open per pool (writes, and GET reads): as
    # many as requests it serves at once, or every request past them opens and closes its own.
    db_pool_size: int = Field(default=10, ge=1, le=100)
    # The queue: how long a claimed job stays a worker's without renewal, how often an idle
    # worker looks for work (PostgreSQL also wakes it by NOTIFY; on SQLite this is the wait
    # before a submission is picked up), claims before giving up.
    lease_seconds: float = 30
    poll_seconds: float = 0.2
    max_attempts: int = 3
    # Whole request bodies above this are refused with 413 before any parsing.
    max_body_bytes: int = 256 * 1024
    # Re-read lesson files and templates on every request (authoring); off in production.
    reload_lessons: bool = False
    # One line per log event: readable text, or JSON for a log collector (the compose file).
    log_format: Literal["text", "json"] = "text"
    # Password reset links by e-mail: sent over SMTP when SMTP_HOST is set (TLS: starttls, ssl
    # or none); without it, the operator runs `treino accounts reset-password EMAIL`. PUBLIC_URL
    # is the address learners reach the tutor at, for links made outside a request (the CLI).
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_user: str | None = None
    smtp_password: SecretStr = SecretStr("")
    smtp_tls: Literal["starttls", "ssl", "none"] = "starttls"
    smtp_from: str = "treino <treino@localhost>"
    public_url: str = "http://127.0.0.1:8000"
    # Proxies whose X-Forwarded-Proto/For uvicorn believes ("*" behind your own load balancer).
    forwarded_allow_ips: str = "127.0.0.1"
    # /metrics answers only requests that send this as `Authorization: Bearer <token>`; unset:
    # open to anyone who can reach it (keep it off the public network then).
    metrics_token: SecretStr | None = None
    # Fair use: code sent for grading per client IP (proxy-aware) in 10 minutes, over all the
    # learners behind it; each learner also has at most one submission waiting at a time.
    submissions_per_ip: int = Field(default=30, ge=1)

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> "Settings":
        if self.env == "production" and self.secret_key.get_secret_value() in ("", DEV_SECRET):
            raise ValueError("TREINO_SECRET_KEY must be set to a long random value in production")
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
