"""Settings, read once from the environment (prefix TREINO_)."""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import SecretStr, model_validator
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
    sandbox: Literal["auto", "bwrap", "process"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    pool_size: int = 2
    # Whole request bodies above this are refused with 413 before any parsing.
    max_body_bytes: int = 256 * 1024
    # Re-read lesson files on every request (authoring); off in production.
    reload_lessons: bool = False

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> "Settings":
        if self.env == "production" and self.secret_key.get_secret_value() in ("", DEV_SECRET):
            raise ValueError("TREINO_SECRET_KEY must be set to a long random value in production")
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
