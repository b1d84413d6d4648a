def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    busy, covered = 0.0, start
    device = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    for a, b in device:
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    span = end - start
    idle = span - busy  # all the idle time, not its longest stretch
    share = busy / span
    name = "compute" if share >= 0.5 else ("input" if share < 0.1 else "launch")
    return {"busy": share, "idle_ms": idle / 1000, "bottleneck": name}
