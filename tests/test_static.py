"""Vendored browser code is pinned and matches its manifest, so it cannot drift silently."""

import hashlib
import json

from app.config import ROOT

VENDOR = ROOT / "static" / "vendor"


def test_vendor_files_match_the_manifest():
    manifest = json.loads((VENDOR / "MANIFEST.json").read_text())
    on_disk = {p.name for p in VENDOR.iterdir()} - {"MANIFEST.json"}
    assert set(manifest) == on_disk
    for name, digest in manifest.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_frontend_dependencies_are_pinned_exactly_and_locked():
    package = json.loads((ROOT / "frontend" / "package.json").read_text())
    lock = json.loads((ROOT / "frontend" / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        assert version[0].isdigit(), f"{name} is not pinned exactly: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
    assert package["dependencies"]["htmx.org"].startswith("2."), "htmx 4 changes semantics"
    assert f"htmx-{package['dependencies']['htmx.org']}.min.js" in json.loads(
        (VENDOR / "MANIFEST.json").read_text())
