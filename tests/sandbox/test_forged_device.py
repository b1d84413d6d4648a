"""time-a-step's device is the supervisor's (issue 41, red team 3): its kernels run on the
supervisor's own timeline, and each figure the learner reports must be what the supervisor saw
the learner's own timed stretches take. Programs that forge the device's events through the
harness's closures, launch by hand without a batch, or write the loop's figure down instead of
timing it do not pass; the solution still does, under both starts."""

import pytest

from app.config import get_settings
from app.lessons.course import load_course

pytestmark = pytest.mark.slow  # real sandboxes, real torch

# the harness's sync and the run's number, taken from train_step's closure
REACH = """
import time

def reach(train_step):
    cells = [c.cell_contents for c in train_step.__closure__ or ()]
    sync = next(c for c in cells if callable(c))
    number = next(c for c in cells if isinstance(c, int))
    return sync, number

def timed(repeats, steps, step, synchronize):
    out = []
    for _ in range(repeats):
        synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize()
        out.append((time.perf_counter() - t) * 1000 / steps)
    return sorted(out)

def answer(same):
    k = same[len(same) // 2]
    step = max(16.0, k)  # the loop's figure written down from the prompt's loading time
    return {"step_ms": step, "spread_ms": [step * 0.97, step * 1.05], "same_batch_ms": k,
            "bound": "compute" if k > 16.0 else "input"}
"""

PROGRAMS = {
    # the device's begin and end sent as syncs of the child's own: kernels it never launched
    "kernel-events-forged": REACH
    + """
def time_training(train_step, loader, synchronize):
    sync, number = reach(train_step)

    def fake_kernel():
        sync("begin", number)
        time.sleep(0.005)
        sync("kernel", number)

    for _ in range(3):
        fake_kernel()
    return answer(timed(5, 6, fake_kernel, synchronize))
""",
    # the same-batch test timed honestly, the loop's figure written down
    "loop-written-down": REACH
    + """
def time_training(train_step, loader, synchronize):
    x = next(iter(loader))
    for _ in range(3):
        train_step(x)
    return answer(timed(5, 6, lambda: train_step(x), synchronize))
""",
    # launches sent by hand, without a batch, timed as if they were the loop
    "launches-by-hand": REACH
    + """
def time_training(train_step, loader, synchronize):
    sync, number = reach(train_step)
    for _ in range(3):
        sync("launch", number)
    return answer(timed(5, 6, lambda: sync("launch", number), synchronize))
""",
}


@pytest.fixture
def exercise():
    """``run`` grades this exercise."""
    found = load_course(get_settings().lessons_dir).exercise("bottleneck/time-a-step")
    assert found is not None
    return found


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_forged_or_unmeasured_timing_does_not_pass(run, mode, program):
    outcome = run(PROGRAMS[program])
    assert outcome.status == "failed", outcome.verdict


def test_the_solution_passes(run, mode, exercise):
    with open(f"{exercise.path}/solution.py", encoding="utf-8") as f:
        outcome = run(f.read())
    assert outcome.status == "passed", outcome.verdict
