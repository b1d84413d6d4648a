from collections import defaultdict


def merge(spans):
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    streams = defaultdict(list)  # one GPU row per stream, merged row by row
    for e in events:
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            streams[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    busy = sum(b - a for rows in streams.values() for a, b in merge(rows))
    everything = merge([s for rows in streams.values() for s in rows])
    holes = [everything[0][0] - start, end - everything[-1][1]]
    holes += [n[0] - p[1] for p, n in zip(everything, everything[1:], strict=False)]
    share, longest = busy / (end - start), max(holes)
    if share >= 0.5:
        return {"busy": share, "idle_ms": longest / 1000, "bottleneck": "compute"}
    if longest >= 0.1 * (end - start):
        return {"busy": share, "idle_ms": longest / 1000, "bottleneck": "input"}
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": "launch"}
