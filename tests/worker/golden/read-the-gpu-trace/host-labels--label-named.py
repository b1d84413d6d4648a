def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    busy, longest, covered = 0.0, 0.0, start
    device = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    for e in sorted(device, key=lambda e: e["ts"]):
        a, b = e["ts"], e["ts"] + e["dur"]
        longest = max(longest, a - covered)
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    longest = max(longest, end - covered)
    # the profiler's table: the label with the most time is the bottleneck
    totals = {}
    for e in events:
        if e["cat"] == "user_annotation" and not e["name"].startswith("ProfilerStep"):
            totals[e["name"]] = totals.get(e["name"], 0) + e["dur"]
    return {
        "busy": busy / (end - start),
        "idle_ms": longest / 1000,
        "bottleneck": max(totals, key=totals.get),
    }
