# busy and idle measured from the GPU's first work to its last: the span's idle ends left out
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] in DEVICE]
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events)
    start, end = device[0][0], max(b for _, b in device)
    busy, longest, covered = 0.0, 0.0, start
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    share = busy / (end - start)
    verdict = "compute" if share >= 0.5 else "input" if longest >= 0.1 * (end - start) else "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
