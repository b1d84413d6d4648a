"""Submissions that are not training loops at all, and what each must produce."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    slug: str
    code: bytes
    lang: str = "en"
    limits: dict = field(default_factory=dict)


PROBE = b"""import os


def train(model, loader, loss_fn, optimizer, accum_steps):
    print(sorted(os.environ))
    print(os.listdir("."), os.listdir(".."))
    os.write(1, b"x" * 200_000)  # straight to the process's stdout
    for _ in range(10_000):
        print("y" * 10)
    raise ValueError("boom")
"""

ZERO_BEFORE_STEP = b"""
def train(model, loader, loss_fn, optimizer, accum_steps):
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.zero_grad()
            optimizer.step()
"""

CASES = {
    "missing-function": Case("accumulate", b"def fit(model):\n    pass\n"),
    "wrong-signature": Case("accumulate", b"def train(model, loader):\n    pass\n"),
    "missing-module": Case("accumulate", b"import treino_no_such_module\n"),
    "probe": Case("accumulate", PROBE, limits={"output_kb": 4}),
    "endless-loop": Case(
        "accumulate",
        b"import time\n\ndef train(*args):\n    while True:\n        time.sleep(0.5)\n",
        limits={"wall_seconds": 8},
    ),
    "exit-without-trace": Case(
        "accumulate", b"import os\n\ndef train(*args):\n    print('bye')\n    os._exit(3)\n"
    ),
    # zeroing between backward and step: no known mistake id
    "zero-before-step": Case("accumulate", ZERO_BEFORE_STEP, lang="pt-BR"),
}
