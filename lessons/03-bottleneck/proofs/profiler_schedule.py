"""torch.profiler with schedule(wait=1, warmup=1, active=2) and prof.step() at each step's end
over 4 steps: the exported trace holds ProfilerStep#2 and ProfilerStep#3 (N counts every step
from 0; wait and warm-up are not recorded), and key_averages() gives one row per name with key,
count, cpu_time_total and device_time_total (µs), a range's time including its inner ops."""

import json
import os
import tempfile

import torch
from torch.profiler import profile, record_function, schedule

model = torch.nn.Linear(8, 8)
with profile(schedule=schedule(wait=1, warmup=1, active=2)) as prof:
    for _ in range(4):
        with record_function("forward"):
            model(torch.randn(4, 8)).sum().backward()
        prof.step()

rows = {row.key: row for row in prof.key_averages()}
forward = rows["forward"]
assert forward.count == 2  # the two active steps only
assert forward.cpu_time_total > 0 and forward.device_time_total == 0  # no GPU here
assert forward.cpu_time_total >= rows["aten::linear"].cpu_time_total  # inner ops included
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        names = {e.get("name", "") for e in json.load(f)["traceEvents"]}
assert {n for n in names if n.startswith("ProfilerStep#")} == {"ProfilerStep#2", "ProfilerStep#3"}
