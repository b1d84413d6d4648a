"""The sandbox's filter, built through the harness's ctypes bindings (worker/seccomp.py says why
those), is the program libseccomp's own Python bindings build: Debian's python3-seccomp, which
only the system Python can import, makes it in a child process, and the two must be the same
bytes. Without libseccomp the filter is said to be unavailable, never built half."""

import subprocess
import sys

import pytest

from app.config import ROOT
from worker import sandbox, seccomp
from worker.harness import libseccomp

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, where python3-seccomp installs the bindings
BUILD = """import sys, seccomp
from worker.seccomp import build
sys.stdout.buffer.write(build(seccomp, tuple(sys.argv[1:])))"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")


def own_bindings(allow: tuple[str, ...]) -> bytes:
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], capture_output=True, check=False)
    if probe.returncode:
        pytest.skip("libseccomp's own bindings are missing (Debian's python3-seccomp: make install as root)")
    done = subprocess.run([SYSTEM_PYTHON, "-c", BUILD, *allow], cwd=ROOT, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


@pytest.mark.parametrize("allow", [(), seccomp.TEMPLATE_ALLOWS], ids=["job", "template"])
def test_same_program_as_libseccomps_bindings(allow):
    ours = seccomp.program(allow)
    assert ours and len(ours) % 8 == 0  # whole BPF instructions
    assert own_bindings(allow) == ours


def test_the_templates_program_leaves_its_calls_off_the_deny_list():
    """Taking calls off the deny list makes another, shorter program: the job's is the stricter."""
    job, template = seccomp.program(), seccomp.program(seccomp.TEMPLATE_ALLOWS)
    assert template != job and len(template) < len(job)


def test_without_libseccomp_the_filter_is_unavailable_and_bwrap_is_not_used(monkeypatch):
    monkeypatch.setattr(libseccomp, "_SONAME", "libseccomp-treino-missing.so.2")
    monkeypatch.setattr(libseccomp, "_library", None)
    seccomp.program.cache_clear()
    sandbox.bwrap_problem.cache_clear()
    monkeypatch.setattr(sandbox, "BWRAP", sys.executable)  # found, whether or not bwrap is here
    try:
        with pytest.raises(seccomp.Unavailable, match="libseccomp-treino-missing"):
            seccomp.program()
        assert "libseccomp-treino-missing" in (sandbox.bwrap_problem() or "")
    finally:
        seccomp.program.cache_clear()
        sandbox.bwrap_problem.cache_clear()
