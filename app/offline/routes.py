"""The offline routes: the service worker (at the root, so its scope is the whole tutor), the web
app manifest, the list of pages "Make available offline" saves, who the page belongs to, and the
page shown for a page that was never saved."""

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from app.i18n import gettext as _
from app.lessons.dependencies import CourseDep
from app.offline.release import WORKER_SOURCE, core_assets, version
from app.web import draft_owner, render

router = APIRouter()
NO_STORE = {"Cache-Control": "no-store"}
# The most pages one browser keeps (issue 47), past which the pages kept longest ago go first:
# the whole course several times over (it saves 20 pages, 0.4 MB; tests/offline/test_routes.py
# checks that it takes at most a quarter of this), about 6 MB at the largest page's size (57 KB).
MAX_PAGES = 100


@router.get("/sw.js", include_in_schema=False)
def service_worker(request: Request) -> Response:
    """The service worker, with this release's version, asset list and page bound written in: a
    deploy changes its bytes, so the browser (which checks it at every visit, past any HTTP
    cache: no-cache) installs the new one."""
    settings = request.app.state.settings
    head = (
        f"const VERSION = {json.dumps(version(settings.lessons_dir))}\n"
        f"const CORE = {json.dumps(core_assets())}\n"
        f'const OFFLINE_URL = "{request.app.url_path_for("offline_page")}"\n'
        f"const MAX_PAGES = {MAX_PAGES}\n"
    )
    return Response(
        head + WORKER_SOURCE.read_text(encoding="utf-8"),
        media_type="text/javascript",
        headers={"Cache-Control": "no-cache", "Service-Worker-Allowed": "/"},
    )


@router.get("/manifest.webmanifest", include_in_schema=False)
def web_manifest(request: Request) -> Response:
    """What an install needs: name, start page, standalone display, icons (any and maskable)."""
    icons = [
        {
            "src": f"/static/icons/icon-{size}.png",
            "sizes": f"{size}x{size}",
            "type": "image/png",
            "purpose": "any",
        }
        for size in (192, 512)
    ] + [
        {
            "src": f"/static/icons/icon-maskable-{size}.png",
            "sizes": f"{size}x{size}",
            "type": "image/png",
            "purpose": "maskable",
        }
        for size in (192, 512)
    ]
    body = {
        "id": "/",
        "name": "treino",
        "short_name": "treino",
        "description": _(
            "Training PyTorch models efficiently on small GPUs: lessons, quick checks and exercises."
        ),
        "lang": request.state.lang,
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": "#fbfaf8",
        "theme_color": "#c2410c",
        "icons": icons,
    }
    return Response(
        json.dumps(body, ensure_ascii=False),
        media_type="application/manifest+json",
        headers={"Cache-Control": "no-cache"},
    )


@router.get("/offline/pages", include_in_schema=False)
def offline_pages(request: Request, course: CourseDep) -> JSONResponse:
    """Everything "Make available offline" saves: the course page, every lesson and exercise page
    and the static files they use."""
    url = request.app.url_path_for
    found = [str(url("course_page")), str(url("offline_page"))]
    for lesson in course.lessons:
        found.append(str(url("lesson_page", slug=lesson.slug)))
        found.extend(
            str(url("exercise_page", slug=lesson.slug, exercise_slug=ex.slug)) for ex in lesson.exercises
        )
    return JSONResponse(
        {"version": version(request.app.state.settings.lessons_dir), "pages": found, "assets": core_assets()},
        headers=NO_STORE,
    )


@router.get("/offline/session", include_in_schema=False)
def offline_session(request: Request) -> JSONResponse:
    """Whose pages these are now and their CSRF token: a page read from the cache may be older
    than a sign-in, and what it queued is sent with the token of now."""
    auth = getattr(request.state, "auth", None)
    owner = draft_owner({"request": request, "user": auth.user if auth else None})
    return JSONResponse({"owner": owner, "csrf_token": request.state.csrf_token}, headers=NO_STORE)


@router.get("/offline", response_class=HTMLResponse, include_in_schema=False)
def offline_page(request: Request):
    """What a page that was never saved shows without a network (the worker keeps this one). It
    is no one's (issue 43): kept once, it is shown to whoever uses the browser later, so it names
    no account, offers no sign-in, and tells the worker nothing about whose pages these are."""
    return render(request, "offline.html")
