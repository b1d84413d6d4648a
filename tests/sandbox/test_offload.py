"""Memory kept where no resident set shows it (issue 41): a loop that is wrong in its memory
(token-loss's backward once per cycle: a whole cycle's activations alive) keeps what autograd
saves in files of the job's tmpfs (/dev/shm, /tmp, its own folder) instead of its pages. Its
numbers are right and the process's high-water mark rises no more than a right loop's, so by the
process's figures alone it passed; the job's cgroup is charged for those files all the same, and
the supervisor reads the cgroup's bytes and peak through the descriptors the worker hands over
with the request (``Cgroup.memory_counters``, ``observer.Counters``). Without a cgroup (a host
that lets the worker make none) there is nothing to read them from: docs/security.md says so.
"""

import pytest

from tests.sandbox.conftest import ANY_START
from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch

OFFLOADED = """
import os
import torch

# the folder named first, then the job's other tmpfs: a whole cycle is more than one holds
FOLDERS = list(dict.fromkeys([{folder!r}, "/dev/shm", "/tmp", "."]))
_made = []


def _pack(tensor):
    folder = FOLDERS[len(_made) % len(FOLDERS)]
    path = os.path.join(folder, f"saved-{{os.getpid()}}-{{len(_made)}}.pt")
    torch.save(tensor.detach().clone(), path)
    _made.append(path)
    return torch.tensor([len(_made) - 1])


def _unpack(key):
    return torch.load(_made[int(key)])


def train(model, loader, loss_fn, optimizer, accum_steps):
    batches = iter(loader)
    for _ in range(len(loader) // accum_steps):
        cycle = [next(batches) for _ in range(accum_steps)]
        n_tokens = sum(int((y != -100).sum()) for _, y in cycle)
        optimizer.zero_grad()
        total = 0
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
            for x, y in cycle:
                total = total + loss_fn(model(x), y).sum() / n_tokens
            total.backward()
        optimizer.step()
        for path in _made:
            os.unlink(path)
        _made.clear()
"""


@pytest.fixture
def exercise():
    """token-loss: a whole cycle's saved tensors (4 x 22 MiB) fit in the job's tmpfs; accumulate's,
    on micro-batches of 160,000, do not (torch.save fails there: an error, a non-pass, but not
    the route this file tests)."""
    return find_exercise("gradient-accumulation/token-loss")


@pytest.fixture
def cgroups(has_cgroups):
    if not has_cgroups:
        pytest.skip("no cgroup here: memory outside the process's pages is counted only with one")


def _memory_failed(outcome):
    assert outcome.status == "failed", outcome.verdict
    memory = [c for c in outcome.verdict["checks"] if "system" in c["name"]]
    assert memory and all(c["status"] == "failed" for c in memory), outcome.verdict
    numbers = [c for c in outcome.verdict["checks"] if c["status"] == "passed"]
    assert numbers, "the loop's numbers are right: only its memory fails"


def test_activations_kept_in_shared_memory_files_do_not_pass(run, mode, start, cgroups):
    _memory_failed(run(OFFLOADED.format(folder="/dev/shm")))


@ANY_START
@pytest.mark.parametrize("folder", ["/tmp", "."])
def test_activations_kept_in_temporary_or_job_files_do_not_pass(run, mode, start, cgroups, folder):
    _memory_failed(run(OFFLOADED.format(folder=folder)))


@ANY_START
def test_the_solution_still_passes_with_the_cgroup_read(run, mode, start, exercise):
    outcome = run(solution_text(exercise))
    assert outcome.status == "passed", outcome.verdict
