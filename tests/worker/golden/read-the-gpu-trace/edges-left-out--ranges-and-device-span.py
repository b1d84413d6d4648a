DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}


def read_trace(trace):
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    # the window: the host's ranges and the GPU's own work (the runtime calls sit inside the ranges)
    edges = [e for e in xs if e["cat"] in DEVICE or e["cat"] in ("user_annotation", "gpu_user_annotation")]
    lo = min(e["ts"] for e in edges)
    hi = max(e["ts"] + e["dur"] for e in edges)
    work = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs if e["cat"] in DEVICE)
    merged = []
    for a, b in work:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    busy = sum(b - a for a, b in merged)
    inner = [n[0] - p[1] for p, n in zip(merged, merged[1:], strict=False)]
    gaps = [merged[0][0] - lo, hi - merged[-1][1], *inner]
    share = busy / (hi - lo)
    idle = max(gaps)
    kind = "compute" if share >= 0.5 else ("input" if idle >= 0.1 * (hi - lo) else "launch")
    return {"busy": share, "idle_ms": idle / 1000, "bottleneck": kind}
