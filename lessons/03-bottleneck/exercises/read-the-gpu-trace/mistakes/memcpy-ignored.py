def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] == "kernel")
    busy, longest, reach = 0.0, 0.0, start
    for a, b in kernels:
        longest = max(longest, a - reach)
        busy += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    longest = max(longest, end - reach)
    share = busy / (end - start)
    verdict = "compute" if share >= 0.5 else "input" if longest >= 0.1 * (end - start) else "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
