"""Vendored browser code is pinned, locked and matches its manifest, so it cannot drift silently."""

import hashlib
import json

from app.config import ROOT

VENDOR = ROOT / "static" / "vendor"
MANIFEST = json.loads((VENDOR / "MANIFEST.json").read_text())
LOCK = json.loads((ROOT / "frontend" / "package-lock.json").read_text())


def test_vendor_files_match_the_manifest():
    on_disk = {str(p.relative_to(VENDOR)) for p in VENDOR.rglob("*") if p.is_file()} - {"MANIFEST.json"}
    assert set(MANIFEST["files"]) == on_disk
    for name, digest in MANIFEST["files"].items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_frontend_dependencies_are_pinned_exactly_and_locked():
    package = json.loads((ROOT / "frontend" / "package.json").read_text())
    pinned = {**package["dependencies"], **package["devDependencies"]}
    for name, version in pinned.items():
        assert version[0].isdigit(), f"{name} is not pinned exactly: {version}"
        assert LOCK["packages"][f"node_modules/{name}"]["version"] == version
    assert pinned["htmx.org"].startswith("2."), "htmx 4 changes semantics (see ecosystem-ux.md)"


def test_the_manifest_was_built_from_the_lock_file():
    for name, version in MANIFEST["versions"].items():
        assert LOCK["packages"][f"node_modules/{name}"]["version"] == version, name
    assert f"htmx-{MANIFEST['versions']['htmx.org']}.min.js" in MANIFEST["files"]
    for name in MANIFEST["versions"]:
        assert f"LICENSES/{name.replace('/', '__')}.txt" in MANIFEST["files"], f"licence of {name}"
