"""fit-the-budget on the one flow (issue 42): the release run's 36 MiB of weights live in the
memory files of the child's hand-off, their pages out of the child's page tables until the
budget's run is over, and the child's mappings of them held for its life (``sharing._HELD``).
Red team 4's routes, ported from the supervisor's mapping (``api._shared``, the old path) to the
hand-off: a step that keeps its gradients and drops the weights' pages from its own page tables
still leaves the gradients counted where a cgroup counts the job; the weights are not the
child's while the budget's run is measured.

Every program runs under both starts (conftest's PAIRS).
"""

import pytest

from app.config import get_settings
from app.lessons.course import load_course

pytestmark = pytest.mark.slow  # real sandboxes, real torch

RELEASED_KERNEL = "Gradients released, as the system counted them"
PEAK_KERNEL = "Peak memory, as the system counted it"

# each step's gradients kept in a list of the program's; in the release run, as the step ends, the
# wide weights' pages dropped from the process's page tables (MADV_DONTNEED through ctypes: the
# memory file keeps their bytes, nothing is unmapped and nothing crashes): they leave its resident
# set (36 MiB, as much as the gradients kept), not the job's cgroup, which still charges the file
HAND_OFF_PAGES_DROPPED = """
import ctypes
import mmap

from torch.utils.checkpoint import checkpoint

stash = []
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def train_step(model, x, y, loss_fn, optimizer):
    h = x
    for block in model.blocks:
        h = checkpoint(block, h, use_reentrant=False)
    loss_fn(model.head(h), y).backward()
    optimizer.step()
    stash.append([p.grad for p in model.parameters()])
    optimizer.zero_grad(set_to_none=True)
    dropped = 0
    for p in model.parameters():
        if p.numel() > 100_000:
            begin = -(-p.data_ptr() // mmap.PAGESIZE) * mmap.PAGESIZE
            end = (p.data_ptr() + p.numel() * p.element_size()) // mmap.PAGESIZE * mmap.PAGESIZE
            dropped += libc.madvise(begin, end - begin, 4) == 0  # MADV_DONTNEED
    print("dropped", dropped)
"""

# the pages of the release run's weights dropped by the program itself before the budget's run
# would count them: it cannot lower what the budget's run reads (they are not in its page tables
# then), and the release run reads them back in
WEIGHTS_PROBED_AT_THE_BUDGET_RUN = """
import torch
from torch.utils.checkpoint import checkpoint

seen = []


def _resident_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def train_step(model, x, y, loss_fn, optimizer):
    seen.append(_resident_kib())
    h = x
    for block in model.blocks:
        h = checkpoint(block, h, use_reentrant=False)
    loss_fn(model.head(h), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print("resident KiB at each call", seen)
"""


def _exercise():
    found = load_course(get_settings().lessons_dir).exercise("gpu-memory/fit-the-budget")
    assert found is not None
    return found


class TestFitTheBudget:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return _exercise()

    def test_gradients_kept_with_the_weights_pages_dropped_do_not_pass_where_a_cgroup_counts(
        self, run, mode, has_cgroups
    ):
        """Dropped from the child's page tables, the weights' pages leave its resident set but stay
        in the job's cgroup, which charges the memory file. Where the host makes no cgroup only the process is
        counted, and this passes, as memory kept outside the process does (docs/security.md)."""
        if not has_cgroups:
            pytest.skip("no cgroup for the job here: only the process's figures are read")
        outcome = run(HAND_OFF_PAGES_DROPPED)
        assert outcome.status == "failed", outcome.verdict
        line = [c for c in outcome.verdict["checks"] if c["name"] == RELEASED_KERNEL]
        assert line and line[0]["status"] == "failed", outcome.verdict
        assert "dropped 18" in outcome.verdict["output"], outcome.verdict

    def test_the_release_runs_weights_are_not_resident_until_after_the_budget_run(self, run, mode):
        """A right step passes, and the process's resident set grew by less than the release run's
        weights (36 MiB) from the first call to the budget run: they were not in its page tables."""
        outcome = run(WEIGHTS_PROBED_AT_THE_BUDGET_RUN)
        assert outcome.status == "passed", outcome.verdict
        line = outcome.verdict["output"].strip().splitlines()[-1]
        seen = [int(v) for v in line.split("[")[1].rstrip("]").split(",")]
        first, budget, release = seen[0], seen[2], seen[3]  # two calls, the budget run, the release run
        assert budget - first < 8 * 1024 and release - budget > 30 * 1024, seen
