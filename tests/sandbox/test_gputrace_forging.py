"""read-the-gpu-trace against a learner who reaches past ``read_trace``: the traces are served by
the sandbox's supervisor under seeds it draws after the fork (worker/harness/gputrace.py), so the
child holds no order to read, and every slice it asks for is counted."""

import pytest

from app.config import get_settings
from app.lessons.course import load_course
from tests.sandbox.conftest import ANY_START

SOLUTION = (
    get_settings().lessons_dir / "03-bottleneck" / "exercises" / "read-the-gpu-trace" / "solution.py"
).read_text()

# the right numbers, and the bottleneck taken from the order the supervisor drew, if the child
# could find it: the loops are modelled in LOOPS order, so the base's index names its loop
ORDER_FROM_MEMORY = (
    SOLUTION.replace("def read_trace(", "def honest(")
    + """
import gc

calls = []


def read_trace(trace):
    answer = honest(trace)
    for o in gc.get_objects():
        if type(o).__name__ == "Served" and o.items is not None and o.items.seeds:
            from harness.gputrace import LOOPS, order

            index = order(o.items.seeds[0], len(o.bases), o.rounds)[len(calls)]
            calls.append(index)
            return {**answer, "bottleneck": LOOPS[index]}
    calls.append(None)
    return {**answer, "bottleneck": "?"}
"""
)

# the right answers, and one more slice asked for on the supervisor's socket
EXTRA_SLICE = (
    SOLUTION.replace("def read_trace(", "def honest(")
    + """
import gc, socket, struct


def read_trace(trace):
    for o in gc.get_objects():
        if type(o).__name__ == "Items":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(o.address)
            s.sendall(struct.pack("!I", 0))
            s.recv(16)
            s.close()
            break
    return honest(trace)
"""
)


@ANY_START
class TestReadTheGpuTrace:
    @pytest.fixture
    def exercise(self):
        found = load_course(get_settings().lessons_dir).exercise("bottleneck/read-the-gpu-trace")
        assert found is not None
        return found

    def test_the_solution_passes_through_the_supervised_path(self, run, mode):
        outcome = run(SOLUTION)
        assert outcome.status == "passed", outcome.verdict

    def test_the_order_of_the_loops_cannot_be_read_from_memory(self, run, mode):
        outcome = run(ORDER_FROM_MEMORY)
        assert outcome.status == "failed", outcome.verdict
        failed = [c["message"] for c in outcome.verdict["checks"] if c["status"] == "failed"]
        assert len(failed) == 1 and failed[0].startswith('You answered "?"'), failed

    def test_a_slice_asked_for_beyond_the_trace_is_interference(self, run, mode):
        outcome = run(EXTRA_SLICE)
        assert outcome.status == "error", outcome.verdict
        assert "cannot rely on its measurements" in outcome.verdict["checks"][0]["message"]
