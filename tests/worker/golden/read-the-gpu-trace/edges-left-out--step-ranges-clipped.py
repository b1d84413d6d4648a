def read_trace(trace):
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in xs if e["name"].startswith("ProfilerStep")]
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    work = sorted(
        (max(e["ts"], lo), min(e["ts"] + e["dur"], hi))
        for e in xs
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    busy, reach, idle = 0.0, lo, 0.0
    for a, b in work:
        if b <= a:
            continue
        idle = max(idle, a - reach)
        if b > reach:
            busy += b - max(a, reach)
            reach = b
    idle = max(idle, hi - reach)
    share = busy / (hi - lo)
    if share >= 0.5:
        kind = "compute"
    elif idle >= (hi - lo) / 10:
        kind = "input"
    else:
        kind = "launch"
    return {"busy": share, "idle_ms": idle / 1000, "bottleneck": kind}
