DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def read_trace(trace):
    """O tempo da própria GPU: fração ocupada da janela, maior trecho parado, o veredito."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in DEVICE)
    busy, longest, covered = 0.0, 0.0, start  # covered: até onde vão os intervalos já juntados
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)  # um trecho parado antes deste intervalo
        if b > covered:
            busy += b - max(a, covered)  # só a parte ainda não contada: os streams se sobrepõem
            covered = b
    longest = max(longest, end - covered)
    span = end - start
    share = busy / span
    if share >= 0.5:
        verdict = "compute"
    elif longest >= 0.1 * span:
        verdict = "input"
    else:
        verdict = "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
