"""Red team 6 on chunked-loss, without a sandbox: where the exercise's memory line sits, and what
the kernel's figure must show before ``graph-kept-across-chunks`` is named (the reported calls of
``lm_head`` alone, only in forward, are what a right loop with each chunk's own backward reports
too). The gradings that gave the figures are in test_chunked_hand_written.py."""

from tests.sandbox.course import find_exercise
from worker.checks import chunked as check
from worker.harness import chunked as harness

MIB = 1 << 20


def _params() -> dict:
    return dict(find_exercise("long-sequences/chunked-loss").check_params)


def test_the_line_holds_a_hand_written_cross_entropy_and_not_the_whole_logits():
    """Measured on the exercise: right loops 28.6-52.6 MiB (a hand-written log-softmax with each
    chunk's own backward: six chunks' logits and 4.6 MiB), the whole logits alone 125 MiB."""
    params = _params()
    chunk = harness.logits_bytes(params, int(params["chunk_size"]))
    assert chunk == 8 * MIB
    assert 6 * chunk + 5 * MIB + 15 * MIB < check.limit(params), "a margin over the most a right loop held"
    assert check.limit(params) + check.HELD < harness.logits_bytes(params) / 1.5


def test_calls_only_in_forward_name_the_graph_kept_only_where_the_rise_reached_the_whole_logits():
    params = _params()
    tokens = int(params["batch_size"]) * int(params["seq_len"])
    chunk = int(params["chunk_size"])
    forward_only = [[0, chunk, False]] * (tokens // chunk + 1)
    whole = harness.logits_bytes(params)
    assert check._named_by_memory(params, forward_only, int(101.0 * MIB)) is None, "red team 6's figure"
    named = check._named_by_memory(params, forward_only, whole + 15 * MIB)
    assert named is not None and named.id == "graph-kept-across-chunks"
    whole_built = check._named_by_memory(params, [[0, tokens, False]], 0)
    assert whole_built is not None and whole_built.id == "whole-logits-built"
