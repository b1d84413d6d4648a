def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    device = sorted((e["ts"], e["dur"]) for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy = sum(dur for _, dur in device)  # every kernel's time added up
    longest, last_end = device[0][0] - start, start
    for ts, dur in device:
        longest = max(longest, ts - last_end)
        last_end = max(last_end, ts + dur)
    longest = max(longest, end - last_end)
    share = busy / (end - start)
    if share >= 0.5:
        return {"busy": share, "idle_ms": longest / 1000, "bottleneck": "compute"}
    if longest >= 0.1 * (end - start):
        return {"busy": share, "idle_ms": longest / 1000, "bottleneck": "input"}
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": "launch"}
