"""Who owns a row: the learner (always a visitor, a user once signed in), the filter every query
of owned rows goes through, and adoption of a visitor's rows by an account.

Rows a learner owns (models.Owned) are read through owned_by() only, and adopt() hands a
visitor's anonymous rows to the account at sign-up and sign-in, so nothing done before is lost.
The owned tables are found in the mapper registry: every table is in it once app.models is
imported (app.main does, for the web).
"""

from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, bindparam, update
from sqlalchemy.orm import Session

from app.accounts.models import Owned, User
from app.db import Base


@dataclass(frozen=True)
class Learner:
    """The current learner: always a visitor, and a user when signed in."""

    visitor_id: str
    user: User | None = None

    @property
    def owner(self) -> dict[str, Any]:
        """The owner columns for a new Owned row."""
        return {"user_id": self.user.id if self.user else None, "visitor_id": self.visitor_id}


def owned_by(model: type[Owned], learner: Learner) -> ColumnElement[bool]:
    """The filter for `model`'s rows that belong to `learner`: every query of owned rows uses it.
    Signed in, the account's rows; anonymous, the visitor's rows that no account has taken."""
    return _owner_filter(model, learner.user.id if learner.user else None, learner.visitor_id)


@cache
def owner_clause(model: type[Owned], signed_in: bool) -> ColumnElement[bool]:
    """owned_by with the learner left as bind parameters, for a statement built once and run
    on every page (give it ``owner_params(learner)``)."""
    user_id: Any = bindparam("owner_user_id") if signed_in else None
    return _owner_filter(model, user_id, bindparam("owner_visitor_id"))


def _owner_filter(model: type[Owned], user_id: Any, visitor_id: Any) -> ColumnElement[bool]:
    if user_id is not None:
        return model.user_id == user_id
    return and_(model.visitor_id == visitor_id, model.user_id.is_(None))


def owner_params(learner: Learner) -> dict[str, Any]:
    if learner.user is not None:
        return {"owner_user_id": learner.user.id}
    return {"owner_visitor_id": learner.visitor_id}


def owned_tables() -> list[Table]:
    """Every table of learners' own rows, by name: what adoption, export and deletion walk."""
    tables = {cast(Table, m.local_table) for m in Base.registry.mappers if issubclass(m.class_, Owned)}
    return sorted(tables, key=lambda t: t.name)


def adopt(session: Session, user: User, visitor_id: str) -> None:
    """Give `user` every anonymous row of `visitor_id`, in every Owned table."""
    for table in owned_tables():
        session.execute(
            update(table)
            .where(table.c.visitor_id == visitor_id, table.c.user_id.is_(None))
            .values(user_id=user.id)
        )
