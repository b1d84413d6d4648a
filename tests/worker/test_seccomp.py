"""The pinned pyseccomp builds the filter libseccomp's own Python bindings build (worker/seccomp.py
says why the pin): Debian's python3-seccomp, which only the system Python can import, makes the
program in a child process, and the two must be the same bytes."""

import subprocess
import sys

import pytest

from app.config import ROOT
from worker import seccomp

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, where python3-seccomp installs the bindings
BUILD = """import sys, seccomp
from worker.seccomp import build
sys.stdout.buffer.write(build(seccomp, tuple(sys.argv[1:])))"""


def own_bindings(allow: tuple[str, ...]) -> bytes:
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], capture_output=True, check=False)
    if probe.returncode:
        pytest.skip("libseccomp's own bindings are missing (Debian's python3-seccomp: make install as root)")
    done = subprocess.run([SYSTEM_PYTHON, "-c", BUILD, *allow], cwd=ROOT, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
@pytest.mark.parametrize("allow", [(), seccomp.TEMPLATE_ALLOWS], ids=["job", "template"])
def test_same_program_as_libseccomps_bindings(allow):
    ours = seccomp.program(allow)
    assert ours and own_bindings(allow) == ours
