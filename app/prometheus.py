"""Prometheus's text exposition, for /metrics: a family's header, and a histogram the database
counts itself (one row back however many rows it covers), so a scrape costs the same on a
server that has graded a million submissions as on a new one.

Imports no domain of app/ (tests/test_layers.py): any domain's part of /metrics may use it."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session


def family(name: str, kind: str, help_text: str) -> list[str]:
    """The HELP and TYPE lines that open a metric family."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def seconds_between(session: Session, start: Any, end: Any) -> ColumnElement[Any]:
    """``end - start`` in seconds, as the database computes it: PostgreSQL from its interval,
    SQLite from Julian days (its times are text; exact to well under a millisecond)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", end - start)
    return (func.julianday(end) - func.julianday(start)) * 86400.0


def histogram(
    session: Session,
    name: str,
    help_text: str,
    value: ColumnElement[Any],
    where: ColumnElement[bool],
    buckets: Sequence[float],
) -> list[str]:
    """A histogram of ``value`` over the rows ``where`` holds: one aggregate query (a count per
    bucket, the sum, the count); no row is read into Python."""
    counts = [func.coalesce(func.sum(case((value <= bound, 1), else_=0)), 0) for bound in buckets]
    *in_bucket, total, count = session.execute(
        select(*counts, func.coalesce(func.sum(value), 0), func.count()).where(where)
    ).one()
    lines = family(name, "histogram", help_text)
    lines += [f'{name}_bucket{{le="{bound}"}} {int(n)}' for bound, n in zip(buckets, in_bucket, strict=True)]
    lines.append(f'{name}_bucket{{le="+Inf"}} {count}')
    lines.append(f"{name}_sum {float(total):.3f}")
    lines.append(f"{name}_count {count}")
    return lines
