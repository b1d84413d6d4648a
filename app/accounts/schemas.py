from datetime import datetime

from pydantic import BaseModel, Field


class Credentials(BaseModel):
    email: str = Field(examples=["ana@example.com"])
    password: str = Field(examples=["four unrelated words here"])


class AccountOut(BaseModel):
    email: str
    lang: str | None = Field(description="The account's language (en or pt-BR), once chosen")


class TokenOut(BaseModel):
    token: str = Field(description="Send as `Authorization: Bearer <token>`; shown only once")
    expires_at: datetime
