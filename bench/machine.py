"""What the figures were measured on."""

import os
import platform
from datetime import UTC, datetime
from importlib.metadata import version


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                platform.processor() or "unknown",
            )
    except OSError:
        return platform.processor() or "unknown"


def _memory_gib() -> float:
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return kib / 1024**2


def describe(isolation: str, device: str, pool_size: int, postgres: str) -> dict[str, str]:
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": f"{os.cpu_count()} × {_cpu_model()}",
        "memory": f"{_memory_gib():.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": version("torch"),
        "sandbox": isolation,
        "device": device,
        "warm pool": f"{pool_size} per worker",
        "postgresql": postgres,
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
