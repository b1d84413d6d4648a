DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
PHASES = ("data", "forward", "backward", "optimizer")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    busy, longest, covered = 0.0, 0.0, start
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in DEVICE):
        longest = max(longest, a - covered)
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    longest = max(longest, end - covered)
    # the verdict from the labelled phases: the longest one is where the time went
    totals = dict.fromkeys(PHASES, 0.0)
    for e in events:
        if e["cat"] == "user_annotation" and e["name"] in totals:
            totals[e["name"]] += e["dur"]
    slowest = max(totals, key=totals.get)
    verdict = "input" if slowest == "data" else "compute"
    return {"busy": busy / (end - start), "idle_ms": longest / 1000, "bottleneck": verdict}
