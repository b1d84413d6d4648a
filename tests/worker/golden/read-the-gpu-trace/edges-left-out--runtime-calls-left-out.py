DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def read_trace(trace):
    """The GPU's own time: busy share of the traced span, longest idle stretch, the verdict."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "cuda_runtime"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in DEVICE)
    busy, longest, covered = 0.0, 0.0, start  # covered: how far the merged intervals reach
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)  # an idle stretch before this interval
        if b > covered:
            busy += b - max(a, covered)  # only the part not already counted: streams overlap
            covered = b
    longest = max(longest, end - covered)
    span = end - start
    share = busy / span
    if share >= 0.5:
        verdict = "compute"
    elif longest >= 0.1 * span:
        verdict = "input"
    else:
        verdict = "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
