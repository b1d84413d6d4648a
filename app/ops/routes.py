import hmac
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

from app.db import SessionDep
from app.errors import ApiError, documented
from app.i18n import gettext as _
from app.ops import service
from app.submissions import workers
from app.tutor import client as tutor_client
from app.tutor import service as tutor_service

router = APIRouter(tags=["operations"])


class HealthOut(BaseModel):
    status: str


class ReadyOut(BaseModel):
    ready: bool
    database: bool
    migrations: bool
    worker: bool
    job_limits: Literal["cgroup", "watchdog"] | None = Field(
        None,
        description="How live workers bound a job's whole tree: `cgroup`, or `watchdog` where "
        "no cgroup could be made (weaker); null with no live worker. Not part of `ready`.",
    )
    tutor: Literal["absent", "reachable", "unreachable"] = Field(
        "absent",
        description="The AI tutor: `absent` (TREINO_TUTOR_URL unset), else whether its endpoint "
        "answered a probe in the last seconds. Not part of `ready`: the course works without it.",
    )


@router.get("/healthz")
def healthz() -> HealthOut:
    """The process is alive."""
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "Not ready: the false fields say why"}},
)
def readyz(request: Request, session: SessionDep) -> JSONResponse:
    """Ready for traffic: database reachable, migrations current, a worker seen in the last minute."""
    checks = service.readiness(session, request.app.state.settings.database_url)
    tutor = tutor_client.reachable(request.app.state.settings)
    return JSONResponse(
        ReadyOut(
            ready=all(checks.values()),
            **checks,
            job_limits=workers.job_limits(workers.live(session)),
            tutor="absent" if tutor is None else "reachable" if tutor else "unreachable",
        ).model_dump(),
        status_code=200 if all(checks.values()) else 503,
    )


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses=documented(
        401,
        s401="TREINO_METRICS_TOKEN is set and this request did not "
        "send it as `Authorization: Bearer <token>`",
    ),
)
def metrics(request: Request, session: SessionDep) -> PlainTextResponse:
    """Prometheus metrics: queue depth, verdicts, grading latency, workers, warm pool, GPUs, and the
    AI tutor (configured, reachable, answers, tokens, latency)."""
    token = request.app.state.settings.metrics_token
    if token is not None and token.get_secret_value():
        scheme, _sep, sent = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            sent.strip().encode(), token.get_secret_value().encode()
        ):
            raise ApiError(
                401,
                _("Send the metrics token as Authorization: Bearer <token>."),
                code="unauthorized",
                headers={"WWW-Authenticate": "Bearer"},
            )
    settings = request.app.state.settings
    tutor = tutor_service.metrics_lines(session, settings, tutor_client.reachable(settings))
    return PlainTextResponse(
        service.metrics(session) + "\n".join(tutor) + "\n", media_type="text/plain; version=0.0.4"
    )
