"""Shared pieces of the catalog models: the declarative base, naming convention and column helpers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    MetaData,
    Table,
    Text,
    column,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, array
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: A hex sha256 digest, lower case (what :mod:`hashlib` ``hexdigest()`` returns).
SHA256_PATTERN = "^[0-9a-f]{64}$"

EnumShape = Literal["scalar", "array", "keys"]


@dataclass(frozen=True)
class EnumCheck:
    """A CHECK mirroring an enum: ``scalar`` (one value), ``array`` (each element), ``keys`` (JSON keys)."""

    table: str
    column: str
    enum: type[StrEnum]
    shape: EnumShape

    @property
    def constraint_name(self) -> str:
        return f"ck_{self.table}_{self.column}_enum"


def enum_check(col: str, enum: type[StrEnum], shape: EnumShape = "scalar") -> CheckConstraint:
    """The CHECK named ``<col>_enum`` that limits ``col`` to ``enum``'s values (see :class:`EnumCheck`)."""
    values = [member.value for member in enum]
    expr: ColumnElement[bool]
    if shape == "scalar":
        expr = column(col).in_(values)
    elif shape == "array":
        # `<@` is false for an array holding a NULL element, so NULL reasons are refused too.
        expr = column(col, ARRAY(Text)).contained_by(array(values, type_=Text))
    else:
        # Removing every allowed key must leave an empty object: unknown keys and non-objects fail.
        expr = column(col, JSONB).op("-")(array(values, type_=Text)) == text("'{}'::jsonb")
    return CheckConstraint(expr, name=f"{col}_enum", info={"enum": enum, "column": col, "shape": shape})


def sha256_check(col: str = "sha256") -> CheckConstraint:
    """``col`` holds a lower-case hex sha256 digest."""
    return CheckConstraint(column(col).regexp_match(SHA256_PATTERN), name=f"{col}_hex")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        int: BigInteger,
        str: Text,
        float: Float,
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSONB,
        list[Any]: JSONB,
        list[str]: ARRAY(Text),
    }


def id_column() -> Mapped[int]:
    return mapped_column(BigInteger, Identity(), primary_key=True)


def now_column() -> Mapped[datetime]:
    return mapped_column(server_default=func.now())


def fk_column(target: str, *, nullable: bool = False, index: bool = False) -> Mapped[Any]:
    return mapped_column(BigInteger, ForeignKey(target), nullable=nullable, index=index)


def table_of(model: type[Base]) -> Table:
    """The Core table of a model: writers use Core INSERT/UPDATE, which skip the ORM's bulk machinery."""
    table = model.__table__
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} is not mapped to a single table")
    return table
