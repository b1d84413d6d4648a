from datetime import datetime

from pydantic import BaseModel, Field

from app.accounts.passwords import EMAIL_MAX, PASSWORD_MAX, PASSWORD_MIN
from app.security import TEXT_PATTERN


class Credentials(BaseModel):
    email: str = Field(examples=["ana@example.com"], pattern=TEXT_PATTERN)
    password: str = Field(examples=["four unrelated words here"], pattern=TEXT_PATTERN)


class NewAccount(BaseModel):
    """Sign-up. The document states the rules the server applies (with messages of its own): an
    address, and a password of 8 to 1024 characters, not only spaces, and not a common one."""

    email: str = Field(
        examples=["ana@example.com"],
        pattern=TEXT_PATTERN,
        json_schema_extra={"maxLength": EMAIL_MAX, "pattern": r"^[^@\s\x00]+@[^@\s.\x00]+(\.[^@\s.\x00]+)+$"},
    )
    password: str = Field(
        examples=["four unrelated words here"],
        pattern=TEXT_PATTERN,
        json_schema_extra={
            "minLength": PASSWORD_MIN,
            "maxLength": PASSWORD_MAX,
            "pattern": r"^[^\x00]*[^\x00\s][^\x00]*$",
        },
    )


class AccountOut(BaseModel):
    email: str
    lang: str | None = Field(description="The account's language (en or pt-BR), once chosen")


class TokenOut(BaseModel):
    token: str = Field(description="Send as `Authorization: Bearer <token>`; shown only once")
    expires_at: datetime
