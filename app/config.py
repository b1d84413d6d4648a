"""Settings, read once from the environment (prefix TREINO_)."""

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
DEV_SECRET = "dev-only-not-secret"
DEV_URL = "http://127.0.0.1:8000"  # `make run`'s


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
    # Requests one web process works on at once; its worker threads and each of its two
    # database pools (writes, GET reads) are this size, and 8 times as many may wait for a
    # place before the rest are answered 503 with Retry-After (app/capacity.py, docs/deploy.md).
    # More threads do not serve CPU-bound pages faster (one interpreter lock): they share it.
    web_concurrency: int = Field(default=8, ge=1, le=200)
    # The queue: how long a claimed job stays a worker's without renewal, how often an idle
    # worker looks for work (PostgreSQL also wakes it by NOTIFY; on SQLite this is the wait
    # before a submission is picked up), claims before giving up.
    lease_seconds: float = 30
    poll_seconds: float = 0.2
    max_attempts: int = 3
    # Whole request bodies above this are refused with 413 before any parsing.
    max_body_bytes: int = 256 * 1024
    # A request's headers, then its body, must each arrive within this many seconds (else 408):
    # a body is read whole before the request takes a place (docs/deploy.md, issue 43).
    request_seconds: float = Field(default=20, gt=0)
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
    # PUBLIC_URL is where learners reach the tutor: every link in a mail (and the CLI's) is built
    # from it, never from a request's Host. Required in production; unset, `treino serve` derives
    # it from --host/--port. Requests for any other host are refused (400), but for ALLOWED_HOSTS
    # (comma-separated, e.g. the address a health check uses) and, in development, localhost.
    public_url: str | None = None
    allowed_hosts: str = ""
    # Proxies whose X-Forwarded-Proto/For are believed (comma-separated addresses or networks, "*"
    # behind your own load balancer); none by default: a client sending X-Forwarded-For to a
    # tutor without a proxy in front would otherwise choose the address every limit counts by.
    forwarded_allow_ips: str = ""
    # /metrics answers only requests that send this as `Authorization: Bearer <token>`; unset:
    # open to anyone who can reach it (keep it off the public network then).
    metrics_token: SecretStr | None = None
    # Fair use: code sent for grading in 10 minutes by each signed-in learner (per account: a
    # classroom behind one address is many learners), and by all the anonymous visitors behind
    # one client IP (proxy-aware) together; each learner also has one submission waiting at most.
    submissions_per_account: int = Field(default=30, ge=1)
    submissions_per_ip: int = Field(default=30, ge=1)
    # Jobs waiting at once from one anonymous client (an IPv4 address or an IPv6 /64), whatever
    # its cookies: a signed-in learner has one each, so signing in lifts this.
    queued_per_client: int = Field(default=4, ge=1)
    # Free storage: the drafts all the anonymous visitors behind one client (an IPv4 address or
    # an IPv6 /64) may keep on the server together, by count and by kilobytes (a signed-in
    # learner's are their account's, not counted here); past either, a save is refused and the
    # code stays in the browser (app/drafts/service.py).
    anonymous_drafts_per_client: int = Field(default=200, ge=1)
    anonymous_draft_kb_per_client: int = Field(default=1024, ge=1)
    # The code of every submission the anonymous visitors behind one client keep on the server
    # together (until retention prunes it), in kilobytes: past it, Submit is refused (429) and
    # says to sign in (app/submissions/routes.py _fair_use); a rate limit alone let one address
    # store about 11 MB an hour.
    anonymous_code_kb_per_client: int = Field(default=8192, ge=1)
    # The quick-check answers and cards reached those visitors keep together: past it an answer
    # is still checked, and said not kept (app/progress/service.within_quota).
    anonymous_answers_per_client: int = Field(default=5000, ge=1)
    # A visitor without an account whose rows (drafts, answers, progress, submissions, tutor
    # conversations) were none of them written for this many days loses them all, and
    # throttling's counts this old go too (app/accounts/retention.py, run by each worker).
    anonymous_days: int = Field(default=30, ge=1)
    # The AI tutor (docs/tutor.md): any OpenAI-compatible server (vLLM, llama.cpp, Ollama, a
    # hosted one) at TUTOR_URL (its base, with or without /v1), asked for TUTOR_MODEL, with
    # TUTOR_API_KEY as a bearer token when set. Unset URL: no tutor panel anywhere.
    tutor_url: str | None = None
    tutor_model: str = "default"
    tutor_api_key: SecretStr | None = None
    # An answer's length, and how long one may take: to its first word, and in all.
    tutor_max_tokens: int = Field(default=400, ge=16, le=4096)
    tutor_first_token_seconds: float = Field(default=30, gt=0)
    tutor_timeout_seconds: float = Field(default=120, gt=0)
    # Fair use per hour: questions and tokens (sent and received) per learner, and for all the
    # anonymous visitors behind one client IP together (proxy-aware; signed-in learners count
    # as themselves only).
    tutor_messages_per_hour: int = Field(default=30, ge=1)
    tutor_tokens_per_hour: int = Field(default=60_000, ge=1)
    tutor_messages_per_ip_hour: int = Field(default=120, ge=1)
    tutor_tokens_per_ip_hour: int = Field(default=240_000, ge=1)
    # An answer whose lines reproduce more than this share of the reference solution's own lines
    # (normalised, before the learner passed or unlocked it) is withheld and a hint given instead.
    tutor_overlap_threshold: float = Field(default=0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> "Settings":
        if self.env == "production" and self.secret_key.get_secret_value() in ("", DEV_SECRET):
            raise ValueError("TREINO_SECRET_KEY must be set to a long random value in production")
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
                raise ValueError(
                    "TREINO_PUBLIC_URL must be an http(s) address, like https://treino.example.org"
                )
        elif self.env == "production":
            raise ValueError("TREINO_PUBLIC_URL must be set in production: mail links are built from it")
        if not (self.tutor_url or "").strip():
            self.tutor_url = None  # an empty TREINO_TUTOR_URL means no tutor
        else:
            parts = urlsplit(self.tutor_url or "")
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("TREINO_TUTOR_URL must be an http(s) address, like http://gpu-host:8000/v1")
        return self

    def site_url(self) -> str:
        """Where learners reach the tutor, without a trailing slash (PUBLIC_URL, else `make run`'s)."""
        return (self.public_url or DEV_URL).rstrip("/")

    def trusted_hosts(self) -> list[str]:
        """The Host values requests may carry: PUBLIC_URL's, ALLOWED_HOSTS, and in development
        localhost by any name (and Starlette's test client's)."""
        public = urlsplit(self.site_url()).hostname or ""
        hosts = [f"[{public}]" if ":" in public else public]  # an IPv6 Host is bracketed
        hosts += [h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()]
        if self.env == "development":
            hosts += ["localhost", "127.0.0.1", "[::1]", "testserver"]
        return list(dict.fromkeys(hosts))


@lru_cache
def get_settings() -> Settings:
    return Settings()
