import json
import os

from worker import sandbox


def write_trace(out, trace):
    out.mkdir(exist_ok=True)
    (out / "trace.json").write_text(json.dumps(trace))


def test_reads_a_regular_trace(tmp_path):
    write_trace(tmp_path / "out", {"outcome": "ok"})
    assert sandbox.read_trace(tmp_path / "out") == {"outcome": "ok"}


def test_does_not_follow_a_linked_trace(tmp_path):
    (tmp_path / "secret.json").write_text('{"stolen": true}')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trace.json").symlink_to(tmp_path / "secret.json")
    assert sandbox.read_trace(tmp_path / "out") is None


def test_does_not_follow_a_linked_out_dir(tmp_path):
    write_trace(tmp_path / "elsewhere", {"outcome": "ok"})
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    assert sandbox.read_trace(tmp_path / "out") is None


def test_refuses_a_fifo_and_an_oversized_trace(tmp_path):
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "trace.json")
    assert sandbox.read_trace(tmp_path / "out") is None
    write_trace(tmp_path / "big", {"x": "y" * 100})
    assert sandbox.read_trace(tmp_path / "big", limit=50) is None


def test_refuses_what_is_not_a_json_object(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trace.json").write_text("[1, 2]")
    assert sandbox.read_trace(tmp_path / "out") is None
