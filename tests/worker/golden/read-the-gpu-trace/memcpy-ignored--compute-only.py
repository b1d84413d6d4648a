WORK = ("kernel", "gpu_memset")  # what the GPU computes


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    merged = []
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in WORK):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    busy = sum(b - a for a, b in merged)
    bounds = [start] + [x for pair in merged for x in pair] + [end]
    longest = max(bounds[i + 1] - bounds[i] for i in range(0, len(bounds), 2))
    share = busy / (end - start)
    name = "compute" if share >= 0.5 else ("input" if longest >= (end - start) / 10 else "launch")
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": name}
