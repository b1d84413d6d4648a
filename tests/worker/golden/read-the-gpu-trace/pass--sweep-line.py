def read_trace(trace):
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    first = min(e["ts"] for e in spans)
    last = max(e["ts"] + e["dur"] for e in spans)
    # +1 where device work starts, -1 where it ends; busy while the count is above zero
    marks = []
    for e in spans:
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            marks.append((e["ts"], 1))
            marks.append((e["ts"] + e["dur"], -1))
    marks.sort(key=lambda m: (m[0], -m[1]))
    running, busy, idle, since = 0, 0.0, [], first
    for t, step in marks:
        if running == 0 and step == 1:
            idle.append(t - since)
        if running > 0:
            busy += t - since
        running += step
        since = t
    idle.append(last - since)
    span = last - first
    share = busy / span
    longest = max(idle)
    if share >= 0.5:
        name = "compute"
    elif longest >= span / 10:
        name = "input"
    else:
        name = "launch"
    return {"busy": share, "idle_ms": longest / 1e3, "bottleneck": name}
