"""Tensor helpers the checks share: parameters as one float64 vector, recorded values (None for
a non-finite number) back as a vector, and a norm."""

import math
from collections.abc import Iterable

import torch


def flat(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The tensors, detached, as one float64 vector on the CPU."""
    return torch.cat([t.detach().reshape(-1) for t in tensors]).to("cpu", torch.float64)


def vector(values: Iterable[float | None]) -> torch.Tensor:
    """A trace's list of floats as a float64 vector (None, a non-finite value, becomes NaN)."""
    return torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float64)


def norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t))
