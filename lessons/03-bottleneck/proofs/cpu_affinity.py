"""os.cpu_count() counts the machine's cores whatever the process may use; os.sched_getaffinity(0)
counts the cores this process is allowed to run on, and the DataLoader's worker warning uses it."""

import inspect
import os

from torch.utils.data import dataloader

machine, before = os.cpu_count(), os.sched_getaffinity(0)
os.sched_setaffinity(0, {min(before)})  # this process may now use one core
try:
    assert len(os.sched_getaffinity(0)) == 1
    assert os.cpu_count() == machine  # the machine's count, unchanged
finally:
    os.sched_setaffinity(0, before)
assert "sched_getaffinity" in inspect.getsource(dataloader.DataLoader.check_worker_number_rationality)
