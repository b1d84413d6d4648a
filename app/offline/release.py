"""The release a service worker belongs to: a digest of everything a page is made of (static
files, templates, lessons, the worker's own source), so that any deploy that changes what a
learner sees changes /sw.js, and browsers install the new worker at their next visit."""

import hashlib
import os
from pathlib import Path

from app.config import ROOT

WORKER_SOURCE = Path(__file__).with_name("sw.js")
STATIC = ROOT / "static"
_CORE = (
    "css/app.css",
    "vendor/htmx-2.0.11.min.js",
    "vendor/codemirror.js",
    "js/offline.js",
    "js/editor.js",
    "js/status.js",
    "js/lesson.js",
    "favicon.svg",
    "icons/icon-192.png",
    "icons/icon-512.png",
)
_memo: dict[tuple, str] = {}


def core_assets() -> list[str]:
    """The static files every page may need, cached when the worker installs (paths under /static/)."""
    return [f"/static/{name}" for name in _CORE if (STATIC / name).is_file()]


def _files(roots: tuple[Path, ...]) -> list[Path]:
    found = []
    for root in roots:
        if root.is_file():
            found.append(root)
            continue
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            found.extend(Path(folder) / n for n in sorted(names) if not n.startswith("."))
    return found


def version(lessons_dir: Path) -> str:
    """12 hex digits that change whenever a static file, a template, a lesson or the worker does.
    Contents are hashed once per set of (path, size, mtime): cheap to ask at every request."""
    files = _files((STATIC, ROOT / "templates", lessons_dir, WORKER_SOURCE))
    signature = tuple((str(p), st.st_size, st.st_mtime_ns) for p in files if (st := p.stat()))
    hit = _memo.get(signature)
    if hit is None:
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(path.anchor)).encode() + b"\0")
            digest.update(path.read_bytes())
        if len(_memo) > 16:
            _memo.clear()
        _memo[signature] = hit = digest.hexdigest()[:12]
    return hit
