DEVICE = ("kernel", "gpu_memcpy")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in DEVICE)
    busy, longest, covered = 0.0, 0.0, start
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    longest = max(longest, end - covered)
    share = busy / (end - start)
    if share >= 0.5:
        verdict = "compute"
    elif longest >= 0.1 * (end - start):
        verdict = "input"
    else:
        verdict = "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
