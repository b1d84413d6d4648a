"""The one warning this project silences: torch says "Failed to initialize NumPy" at import
where NumPy is not installed, and nothing here needs NumPy.

Each process entry point silences it once (``treino`` in ``worker/cli.py``, the sandbox in
``run.py``, the benchmarks, pytest through pyproject's ``filterwarnings``); ``ignored()`` is for
code that imports torch inside a process it does not own (the harness's runtime in a benchmark).
Standard library only: the sandbox imports it as ``harness.quiet``.
"""

import contextlib
import warnings
from collections.abc import Iterator

NUMPY_NOTICE = "Failed to initialize NumPy"


def silence() -> None:
    """For the rest of this process."""
    warnings.filterwarnings("ignore", message=NUMPY_NOTICE)


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """For the block only."""
    with warnings.catch_warnings():
        silence()
        yield
