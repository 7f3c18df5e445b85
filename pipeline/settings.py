"""The one place that reads the ``SLUICE_*`` environment.

:func:`load_settings` is called once by an entry point (the CLI, a DAG task, a test fixture) and the
resulting :class:`Settings` is passed down. Library code never reads the environment itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.errors import ConfigError
from pipeline.warehouse.connection import (
    DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_TIMEOUT_S,
    MAX_LIMIT_BYTES,
    MAX_TIMEOUT_S,
    WarehouseLimits,
)


class Settings(BaseSettings):
    """Where Sluice keeps its state and which services it talks to."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_", frozen=True, extra="forbid")

    home: Path = Field(default=Path(".sluice"), description="State folder: local Postgres, store, warehouse.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of an existing Postgres; when unset Sluice starts its own under home.",
    )
    ingest_database_url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL of the catalog as its ingest role (sluice_ingest), which every step, DAG task "
            "and CLI read connects with. Unset: the role's URL from the local cluster's roles file, or, "
            "with SLUICE_DATABASE_URL set, that URL's role (with a warning: steps then run with more "
            "privilege than they need)."
        ),
    )
    store_url: str | None = Field(
        default=None, description="fsspec URL of the store (raw/, derived/, shards/, manifests/)."
    )
    store_verify: Literal["sample", "full"] = Field(
        default="sample",
        description=(
            "How much of each landed file is re-read from the device before it is published: a random "
            "sample of its MiB plus its first and last (default), or every byte (about half the landing "
            "throughput on a disk that cannot read beside its writes; see pipeline.store)."
        ),
    )
    #: Staging files older than this are left by a killed lander (a landing of the largest inputs takes
    #: minutes); the ingest step removes them when it starts.
    staging_max_age_s: float = Field(
        default=24 * 3600.0, gt=0, description="Age after which a tmp/ staging file counts as abandoned."
    )
    airflow_database_url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL of Airflow's metadata DB for the local Airflow (`sluice run`, `sluice airflow "
            "up`, the demo); when unset, a database of its own beside the catalog, <catalog>_airflow."
        ),
    )
    warehouse_timeout_s: float | None = Field(
        default=DEFAULT_TIMEOUT_S,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Time limit of each warehouse read (sluice query, dataset filters, the UI); unset = none.",
    )
    warehouse_memory_limit_bytes: int = Field(
        default=DEFAULT_MEMORY_LIMIT_BYTES,
        ge=64 << 20,
        le=MAX_LIMIT_BYTES,
        description="Memory a warehouse connection may use before it spills (DuckDB's default is 80% of RAM).",
    )
    #: A run's steps record their items as they go, so a live run is never a day without activity (an item
    #: of the longest transcode takes minutes); one that is has lost its process.
    run_abandoned_after_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="A run still 'running' after this long without activity is closed as failed (abandoned).",
    )
    ray_address: str | None = Field(
        default=None,
        description=(
            "Ray cluster for the heavy steps (`auto`, `host:port`, `ray://host:port`); unset = no Ray: every "
            "step runs in its task's (or the command's) own processes."
        ),
    )
    vendors_dir: Path = Field(default=Path("dags/vendors"), description="Folder of vendor YAML files.")
    project_dir: Path = Field(
        default=Path("."), description="Folder that relative vendor source paths are resolved against."
    )

    @field_validator("home")
    @classmethod
    def _home_is_a_folder(cls, home: Path) -> Path:
        # os.path: a home under a folder this user cannot enter is said later, by what tries to use it
        from pipeline.paths import nearest_existing

        where = nearest_existing(home.expanduser())  # the home, or what is in the way of making it
        if not os.path.isdir(where):
            raise ValueError(f"{where} is a file, not a folder")
        return home

    @field_validator("database_url", "ingest_database_url", "airflow_database_url")
    @classmethod
    def _postgres_url(cls, url: str | None) -> str | None:
        """A URL SQLAlchemy parses and that names Postgres, checked here rather than at the first connect (where
        a typo surfaced as SQLAlchemy's or a missing driver's traceback)."""
        if not url:  # unset, or set empty for one command (`SLUICE_DATABASE_URL= sluice ...`): the default
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(url)
        except ArgumentError:
            raise ValueError(
                "not a database URL (expected postgresql://user:password@host:port/database)"
            ) from None
        if parsed.get_backend_name() != "postgresql":
            raise ValueError(
                f"names {parsed.get_backend_name()!r}; Sluice's databases are Postgres (postgresql://...)"
            )
        return url

    @property
    def home_abs(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def project_dir_abs(self) -> Path:
        return self.project_dir.expanduser().resolve()

    @property
    def store(self) -> str:
        """The store URL, defaulting to a local folder under home."""
        return self.store_url or str(self.home_abs / "store")

    @property
    def warehouse_limits(self) -> WarehouseLimits:
        """What each warehouse read may use, from the settings."""
        return WarehouseLimits(
            timeout_s=self.warehouse_timeout_s, memory_limit_bytes=self.warehouse_memory_limit_bytes
        )

    @property
    def warehouse_path(self) -> Path:
        return self.home_abs / "warehouse.duckdb"


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; keyword overrides win (used by tests and the CLI's options).

    A value that does not validate raises :class:`~pipeline.errors.ConfigError` naming its variable
    (``SLUICE_<FIELD>``) or, for an override, its field, with the value given.
    """
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            name = field if field in overrides else f"SLUICE_{field.upper()}"
            # the message of a field validator's ValueError comes prefixed by pydantic
            message = error["msg"].removeprefix("Value error, ")
            # a URL may hold a password: not echoed
            given = "" if field.endswith("_url") else f" (given: {error['input']!r})"
            problems.append((name, f"{message}{given}"))
        raise ConfigError("settings", problems) from None
