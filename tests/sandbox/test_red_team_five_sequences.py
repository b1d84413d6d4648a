"""The fifth red team's findings on lesson 6 (issue 41), closed: each wrong program below passed
before and must not pass now; each right one, written in a style the grader did not expect, must
pass. Each runs under both starts (conftest's PAIRS): both exercises are graded on the kernel's
count of the process, which each start counts.

- chunked-loss: the whole logits built at once in one buffer, softmax and its gradient in place,
  ``lm_head`` never called (it rose 67-70 MiB under the 72 MiB line of a 1,000-token batch): the
  first batch is 2,000 tokens now, its whole logits 125 MiB, far above the line.
- pack-the-batch: a padded row per document, its forward written by hand, with a call of the
  embedding for show that the hook reports as packed (it passed where the small maths run was not
  counted): one run now, whose memory the kernel counts.
- Both: a right loop that takes its batches first (``list(loader)``, every batch packed first)
  was refused, its parameters read at the next batch's fetch, before it stepped: they are read at
  the optimizer's step now.

Not closed, and said in docs/security.md and the verdicts: the kernel's line bounds bytes, not
rows (a lean buffer per chunk fits chunks about four times ``chunk_size`` under it), and a loop
that runs each document alone, unpadded, in a forward of its own, uses no more memory than a
packed one (only the program's own report of its calls tells them apart).
"""

from pathlib import Path

import pytest

from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch


def _line(outcome, name):
    """The verdict's line whose name holds ``name``."""
    [line] = [c for c in outcome.verdict["checks"] if name in c["name"]]
    return line


GOLDEN = Path(__file__).parents[1] / "worker" / "golden"
# the red team's programs, kept as golden files (tests/worker/test_golden.py grades them too)
CHUNK_WHOLE_LEAN = (GOLDEN / "chunked-loss" / "fail--whole-logits-in-one-lean-function.py").read_text()
CHUNK_LIST_LOADER = (GOLDEN / "chunked-loss" / "pass--batches-taken-first.py").read_text()
PACK_PADDED_FOR_SHOW = (
    GOLDEN / "pack-the-batch" / "one-document-per-row--hand-forward-and-a-call-for-show.py"
).read_text()
PACK_LIST_LOADER = (GOLDEN / "pack-the-batch" / "pass--every-batch-packed-first.py").read_text()


class TestChunkedLoss:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("long-sequences/chunked-loss")

    def test_the_whole_logits_in_one_lean_buffer_do_not_pass(self, run, mode, start):
        outcome = run(CHUNK_WHOLE_LEAN)
        assert outcome.status == "failed", outcome.verdict
        assert _line(outcome, "Parameters")["status"] == "passed", "right numbers: the memory fails it"
        assert _line(outcome, "system")["status"] == "failed", outcome.verdict

    def test_a_loop_that_takes_its_batches_first_passes(self, run, mode, start):
        outcome = run(CHUNK_LIST_LOADER)
        assert outcome.status == "passed", outcome.verdict

    def test_the_solution_passes(self, run, mode, start, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


class TestPackTheBatch:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("long-sequences/pack-the-batch")

    def test_a_padded_row_per_document_with_a_call_for_show_does_not_pass(self, run, mode, start):
        outcome = run(PACK_PADDED_FOR_SHOW)
        assert outcome.status == "failed", outcome.verdict
        assert _line(outcome, "Each document")["status"] == "passed", "right numbers: the memory fails it"
        assert _line(outcome, "packed into rows")["status"] == "failed", outcome.verdict
        assert "operating system" in _line(outcome, "packed into rows")["message"]

    def test_a_loop_that_packs_every_batch_first_passes(self, run, mode, start):
        outcome = run(PACK_LIST_LOADER)
        assert outcome.status == "passed", outcome.verdict

    def test_the_solution_passes(self, run, mode, start, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict
