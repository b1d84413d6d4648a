"""A memory snapshot (CUDA): recorded allocations, with the live ones in its segments."""

import pickle
import tempfile
from pathlib import Path

import torch

torch.cuda.memory._record_memory_history(max_entries=1000)
x = torch.empty(2**20, device="cuda")
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "snapshot.pickle"
    torch.cuda.memory._dump_snapshot(str(path))
    snapshot = pickle.loads(path.read_bytes())
torch.cuda.memory._record_memory_history(enabled=None)
assert snapshot["segments"] and snapshot["device_traces"]
blocks = [b for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
assert any(b["size"] >= x.numel() * 4 for b in blocks)
alloc = [e for t in snapshot["device_traces"] for e in t if e["action"] == "alloc"]
assert alloc and all("frames" in e for e in alloc)
