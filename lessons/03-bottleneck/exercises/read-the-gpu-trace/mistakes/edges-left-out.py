DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] in DEVICE]
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events)
    start = device[0][0]
    end = max(b for _, b in device)
    busy, longest, covered = 0.0, 0.0, start
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    share = busy / (end - start)
    if share >= 0.5:
        verdict = "compute"
    elif longest >= 0.1 * (end - start):
        verdict = "input"
    else:
        verdict = "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
