"""Outgoing e-mail (password reset links), over SMTP when TREINO_SMTP_HOST is set.

The app holds one sender in `app.state.mailer`: an SmtpMailer when SMTP is configured, else
None (the pages then say to ask the operator, who has `treino accounts reset-password EMAIL`).
Tests put any object with the same `send(to, subject, body)` there.
"""

import smtplib
import ssl
from email.message import EmailMessage
from typing import Protocol

from app.config import Settings


class Mailer(Protocol):
    def send(self, to: str, subject: str, body: str) -> None: ...


class SmtpMailer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def send(self, to: str, subject: str, body: str) -> None:
        s = self.settings
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = s.smtp_from, to, subject
        message.set_content(body)
        context = ssl.create_default_context()
        assert s.smtp_host
        smtp = (
            smtplib.SMTP_SSL(s.smtp_host, s.smtp_port, timeout=20, context=context)
            if s.smtp_tls == "ssl"
            else smtplib.SMTP(s.smtp_host, s.smtp_port, timeout=20)
        )
        with smtp:
            if s.smtp_tls == "starttls":
                smtp.starttls(context=context)
            if s.smtp_user:
                smtp.login(s.smtp_user, s.smtp_password.get_secret_value())
            smtp.send_message(message)


def mailer(settings: Settings) -> Mailer | None:
    return SmtpMailer(settings) if settings.smtp_host else None
