"""requirements.lock says what `make install` installs: every requirement of pyproject.toml (the
app's and the dev extra's) is pinned there, at a version its range allows. A range changed without
`make lock` fails here, naming the package."""

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from app.config import ROOT


def locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_requirement_is_locked_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = locked()
    wrong = []
    for text in project["dependencies"] + project["optional-dependencies"]["dev"]:
        req = Requirement(text)
        pin = pins.get(canonicalize_name(req.name))
        if pin is None or not req.specifier.contains(pin, prereleases=True):
            wrong.append(f"{text} (locked: {pin})")
    assert not wrong, f"not in requirements.lock as pyproject.toml asks (make lock): {wrong}"


def test_torch_is_locked_without_a_build_label():
    """So pip takes the CPU build where its file is at hand and the CUDA build elsewhere."""
    assert locked()["torch"].local is None


def test_one_http_client_in_the_code():
    """httpx2 is the project's one HTTP client (issue 33): httpx is in the lock only because
    openapi-python-client needs it; nothing of ours imports it."""
    import re

    found = [
        str(path.relative_to(ROOT))
        for folder in ("app", "worker", "bench", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"^\s*(import httpx|from httpx import)\b(?!2)", path.read_text(), re.MULTILINE)
    ]
    assert found == []
