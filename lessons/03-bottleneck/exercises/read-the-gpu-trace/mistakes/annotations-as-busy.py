BUSY = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")  # everything on the GPU's rows


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    merged = []
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in BUSY):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    busy = sum(b - a for a, b in merged)
    gaps = [merged[0][0] - start, end - merged[-1][1]]
    gaps += [nxt[0] - prev[1] for prev, nxt in zip(merged, merged[1:], strict=False)]
    share, longest = busy / (end - start), max(gaps)
    if share >= 0.5:
        verdict = "compute"
    elif longest >= 0.1 * (end - start):
        verdict = "input"
    else:
        verdict = "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
