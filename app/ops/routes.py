from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from app.db import SessionDep
from app.ops import service

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request, session: SessionDep) -> JSONResponse:
    """Ready for traffic: database reachable, migrations current, a worker seen in the last minute."""
    checks = service.readiness(session, request.app.state.settings.database_url)
    return JSONResponse({"ready": all(checks.values()), **checks},
                        status_code=200 if all(checks.values()) else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(session: SessionDep) -> PlainTextResponse:
    """Prometheus metrics: queue depth, verdicts, grading latency, workers, warm pool, GPUs."""
    return PlainTextResponse(service.metrics(session), media_type="text/plain; version=0.0.4")
