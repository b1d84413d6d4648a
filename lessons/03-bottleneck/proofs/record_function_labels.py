"""record_function ranges come out of the profiler as one row per label, with their host time."""

import time

import torch
from torch.profiler import profile, record_function

with profile() as prof:
    for _ in range(3):
        with record_function("data"):
            time.sleep(0.01)
        with record_function("forward"):
            torch.ones(4) @ torch.ones(4)
rows = {row.key: row for row in prof.key_averages()}
assert rows["data"].count == 3 and rows["forward"].count == 3
assert rows["data"].cpu_time_total >= 3 * 10_000 * 0.9  # microseconds
assert rows["data"].cpu_time_total > rows["forward"].cpu_time_total
