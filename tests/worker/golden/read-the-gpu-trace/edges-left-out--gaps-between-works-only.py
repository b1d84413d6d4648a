# Busy over the whole span, but idle looked for only between the GPU's works: the ends left out.
def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    device = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    busy, longest, covered = 0.0, 0.0, device[0][0]
    for a, b in device:
        longest = max(longest, a - covered)
        busy += max(0.0, b - max(a, covered))
        covered = max(covered, b)
    share = busy / (end - start)
    verdict = "compute" if share >= 0.5 else "input" if longest >= 0.1 * (end - start) else "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
