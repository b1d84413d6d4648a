"""The child's seccomp filter (worker/harness/childfilter.py) is built by libseccomp, through the
harness's own ctypes bindings (worker/harness/libseccomp.py, standard library only; the sandbox's
filter is built with them too), and comes out byte for byte as libseccomp's own Python bindings
build it; and
the Linux numbers and calls (worker/harness/linux.py) fail loudly, never silently.

What the filter refuses, run, is proven in tests/worker/test_supervise.py (threads, forks,
signals, renicing, ptrace) and tests/sandbox/test_signals_and_trace.py (descriptor owners)."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository: the harness is the package worker.harness
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, where python3-seccomp installs the bindings
BUILD = f"""
import importlib, os, sys
sys.path.insert(0, {str(ROOT)!r})
from worker.harness import childfilter
bindings = importlib.import_module(sys.argv[1])
read, write = os.pipe()
with os.fdopen(write, "wb") as out:
    childfilter.build(bindings, sys.argv[2] == "alone").export_bpf(out)
sys.stdout.buffer.write(os.fdopen(read, "rb").read())
"""
PFC = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import seccomp
from worker.harness import childfilter
childfilter.build(seccomp, True).export_pfc(sys.stdout)
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine != "x86_64", reason="x86_64 Linux's numbers"
)


def program(python: str, bindings: str, alone: bool) -> bytes:
    done = subprocess.run(
        [python, "-c", BUILD, bindings, "alone" if alone else "not"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def has_own_bindings() -> bool:
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.parametrize("alone", [False, True], ids=["shared", "alone"])
def test_the_harness_bindings_build_what_libseccomps_own_build(alone):
    ours = program(sys.executable, "worker.harness.libseccomp", alone)
    assert ours and len(ours) % 8 == 0
    if not has_own_bindings():
        pytest.skip("libseccomp's own bindings are missing (Debian's python3-seccomp)")
    assert program(SYSTEM_PYTHON, "seccomp", alone) == ours


@pytest.mark.skipif(not has_own_bindings(), reason="libseccomp's own bindings print the filter")
def test_the_filter_keeps_every_rule_of_the_hand_built_one():
    """Read back from libseccomp's own listing of the program: another ABI (i386, x32) gets
    EPERM; the threads and processes of an ``alone`` child, reaching into other processes,
    SIGSTOP, renicing others and a descriptor that signals are refused; the compared arguments
    that are ints to the kernel are compared on their low word."""
    text = subprocess.run([SYSTEM_PYTHON, "-c", PFC], capture_output=True, text=True, check=True).stdout
    assert "# invalid architecture action\naction ERRNO(1);" in text
    for name in ("clone", "fork", "vfork", "ptrace", "process_vm_readv", "pidfd_getfd", "kcmp"):
        assert f'syscall "{name}"' in text, name
    assert 'syscall "clone3" (435)' in text and "action ERRNO(38);" in text
    for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "fcntl", "ioctl"):
        section = text.split(f'syscall "{name}"')[1].split("# filter for")[0]
        assert "hi32 & 0x00000000 == 0" in section, name  # the high word is not compared
    kill = text.split('syscall "kill"')[1].split("# filter for")[0]
    assert "lo32 & 0xffffffff == 19" in kill  # SIGSTOP
    fcntl = text.split('syscall "fcntl"')[1].split("# filter for")[0]
    for command in (8, 10, 15):  # F_SETOWN, F_SETSIG, F_SETOWN_EX
        assert f"lo32 & 0xffffffff == {command})" in fcntl
    assert "lo32 & 0x00002000 == 8192" in fcntl  # F_SETFL with O_ASYNC
    ioctl = text.split('syscall "ioctl"')[1].split("# filter for")[0]
    for request in (0x8901, 0x8902, 0x5452):
        assert f"== {request})" in ioctl
    for name in ("setpriority", "ioprio_set", "prlimit64", "sched_setparam", "sched_setattr"):
        assert f'syscall "{name}"' in text, name


def test_a_test_libseccomp_cannot_express_is_refused_when_built():
    from worker.harness import childfilter, libseccomp

    with pytest.raises(ValueError, match="no libseccomp comparison"):
        childfilter._compare(libseccomp, 2, "&", 0b11)  # any of two bits: one clause each


def test_linux_calls_raise_with_their_errno():
    from worker.harness import linux

    with pytest.raises(OSError) as raised:
        linux.prctl(0x7FFF_FFFF)  # no such option
    assert raised.value.errno == errno.EINVAL
    with pytest.raises(OSError) as raised:
        linux.mount(None, "/nonexistent-treino", None, linux.MS_REMOUNT)
    assert raised.value.errno in (errno.ENOENT, errno.EPERM)


def test_a_call_by_number_is_refused_clearly_on_another_architecture(monkeypatch):
    from worker.harness import linux

    monkeypatch.setattr(linux, "MACHINE", "riscv64")
    with pytest.raises(linux.Unsupported, match="riscv64"):
        linux.join_session_keyring()
