HOST = ("user_annotation", "cuda_runtime")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] not in HOST)
    busy, longest, reach = 0.0, 0.0, start
    for a, b in gpu:
        longest = max(longest, a - reach)
        if b > reach:
            busy += b - max(a, reach)
            reach = b
    longest = max(longest, end - reach)
    share = busy / (end - start)
    name = "compute" if share >= 0.5 else ("input" if longest >= (end - start) / 10 else "launch")
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": name}
