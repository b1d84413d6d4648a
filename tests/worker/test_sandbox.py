"""The trace is untrusted input: one schema (worker/harness/trace.py), checked before any check
sees it. Each refusal here is a trace a learner's program could have written."""

import json

import pytest

from worker.harness import trace_schema


def good(**changes) -> dict:
    trace = {
        "version": 1,
        "kind": "accumulation",
        "outcome": "ok",
        "error": None,
        "data": {"steps": [{"loss": 1.25, "grads": [[0.5, -0.25]]}]},
        "output": "hello\n",
        "output_dropped": 0,
        "timings": {"import_ms": 3100, "run_ms": 42},
    }
    return {**trace, **changes}


def raw(trace) -> bytes:
    return json.dumps(trace).encode()


def test_a_trace_the_harness_writes_is_taken_as_it_is():
    trace = good()
    assert trace_schema.parse(trace_schema.dumps(trace).encode()) == trace
    error = {
        "phase": "run",
        "type": "ValueError",
        "message": "bad",
        "traceback": [{"line": 3, "function": "train", "code": "x = 1"}],
    }
    assert trace_schema.parse(raw(good(outcome="error", error=error)))["error"] == error


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"version": 1, "timings": {"run_ms": NaN}}', "non-finite"),
        ('{"version": 1, "timings": {"run_ms": Infinity}}', "non-finite"),
        ('{"version": 1, "data": -Infinity}', "non-finite"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ('{"a": ' * 40 + "1" + "}" * 40, "nested deeper"),
        ("[1, 2]", "not an object"),
        ("\xff\xfe", "not JSON"),
        ("", "not JSON"),
    ],
)
def test_what_is_not_a_trace_is_refused(text, why):
    with pytest.raises(trace_schema.Invalid, match=why):
        trace_schema.parse(text.encode("latin-1") if text.startswith("\xff") else text.encode())


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"version": 2}, "version"),
        ({"kind": 3}, "kind"),
        ({"outcome": "passed"}, "outcome"),
        ({"outcome": "error", "error": None}, "without error"),
        ({"outcome": "error", "error": {"message": ["x"]}}, "message"),
        ({"outcome": "error", "error": {"traceback": [{"line": "3"}]}}, "line number"),
        ({"output": {"text": "hi"}}, "output"),
        ({"output_dropped": -1}, "count"),
        ({"timings": {"run_ms": "fast"}}, "timing"),
        ({"timings": {"run_ms": -5}}, "timing"),
        ({"output": "y" * (trace_schema.MAX_STRING + 1)}, "string of"),
    ],
)
def test_a_trace_that_breaks_the_schema_is_refused(changes, why):
    with pytest.raises(trace_schema.Invalid, match=why):
        trace_schema.parse(raw(good(**changes)))


def test_size_and_value_count_are_capped():
    with pytest.raises(trace_schema.Invalid, match="bytes"):
        trace_schema.parse(raw(good(output="y" * 100)), limit=50)
    with pytest.raises(trace_schema.Invalid, match="values"):
        trace_schema.parse(raw(good(data=[0] * (trace_schema.MAX_VALUES + 1))), limit=64 * 1024 * 1024)


def test_linux_numbers_are_per_architecture_and_the_keyring_join_is_checked():
    """SYS_KEYCTL was x86_64's 250 everywhere (arm64's is 219) and its return unchecked, so an
    arm64 job silently kept the shared keyring."""
    import subprocess
    import sys

    from worker.harness import linux

    assert set(linux.SYSCALLS["x86_64"]) == set(linux.SYSCALLS["aarch64"])
    assert (linux.SYSCALLS["x86_64"]["keyctl"], linux.SYSCALLS["aarch64"]["keyctl"]) == (250, 219)
    assert set(linux.AUDIT_ARCH) == set(linux.SYSCALLS)
    joined = subprocess.run(
        [sys.executable, "-c", "from worker.harness import linux; print(linux.join_session_keyring())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert joined.stdout.strip() in ("True", "False"), joined.stderr
