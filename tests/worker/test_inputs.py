"""An exercise's inputs drawn once by the worker and mapped by each job (worker/harness/inputs.py):
the accumulation exercises' micro-batches, 71-100 MB each exercise, no longer drawn by every job."""

import errno
import fcntl
import os
from pathlib import Path

import pytest
import torch

from worker.checks import accumulation
from worker.harness import inputs

SOLUTION = Path("lessons/02-gradient-accumulation/exercises/accumulate/solution.py").read_text()


def test_the_file_holds_the_tensors_sealed_and_a_job_writing_them_changes_only_its_own_copy():
    made = [torch.arange(12, dtype=torch.float64).view(3, 4), torch.tensor([2, 0, 1]), torch.ones(5)]
    fd, layout = inputs.write(made)
    try:
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & inputs.SEALS == inputs.SEALS
        with pytest.raises(OSError) as refused:
            os.pwrite(fd, b"\0" * 8, 0)
        assert refused.value.errno == errno.EPERM
        for _ in range(2):  # two jobs, one after the other, each with its own descriptor
            inputs.keep(os.dup(fd), layout)
            got = inputs.tensors()
            assert inputs.tensors() is None  # taken once
            assert [t.dtype for t in got] == [t.dtype for t in made]
            assert all(torch.equal(a, b) for a, b in zip(got, made, strict=True))
            for t in got:
                t.zero_()  # the first job vandalises its inputs: the second still gets them whole
    finally:
        os.close(fd)


def test_an_unsealed_file_is_refused():
    fd = os.memfd_create("not-sealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 64)
    with pytest.raises(RuntimeError, match="not sealed"):
        inputs.keep(fd, [{"shape": [8], "dtype": "float64", "offset": 0}])
    with pytest.raises(OSError):
        os.fstat(fd)  # closed, refused or not


def test_the_worker_sends_the_micro_batches_its_reference_was_built_from(exercise):
    params = exercise("accumulate").check_params
    fd, layout = accumulation.job_tensors(params)
    inputs.keep(fd, layout)
    got = inputs.tensors()
    from worker.harness import scenarios

    drawn = scenarios.build(params).micro_batches
    assert len(got) == 2 * len(drawn)
    assert all(torch.equal(a, b) for a, b in zip(got, [t for batch in drawn for t in batch], strict=True))


@pytest.mark.slow
def test_a_job_maps_the_inputs_and_a_loop_that_overwrites_them_spoils_only_its_own_run(exercise, grade):
    accumulate = exercise("accumulate")
    looks = (
        "import os\n"
        "mapped = sum('treino-inputs' in line for line in open('/proc/self/maps'))\n"
        "def target(n):\n"
        "    try:\n"
        "        return os.readlink(f'/proc/self/fd/{n}')\n"
        "    except OSError:  # listdir's own descriptor, closed since\n"
        "        return ''\n"
        "held = [target(n) for n in os.listdir('/proc/self/fd')]\n"
        "print('mapped', mapped > 0, 'held', any('treino-inputs' in h for h in held))\n"
    )
    verdict = grade(accumulate, (looks + SOLUTION).encode())
    assert verdict["status"] == "passed", verdict
    assert "mapped True held False" in verdict["output"]

    vandal = SOLUTION.replace("def train(", "def _train(") + (
        "\ndef train(model, loader, loss_fn, optimizer, accum_steps):\n"
        "    for x, y in loader:\n"
        "        x.mul_(-1.0)\n"
        "    return _train(model, loader, loss_fn, optimizer, accum_steps)\n"
    )
    assert grade(accumulate, vandal.encode())["status"] == "failed"
    assert grade(accumulate, SOLUTION.encode())["status"] == "passed"  # the next learner's inputs are whole
