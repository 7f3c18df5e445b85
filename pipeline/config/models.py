"""The vendor configuration: one YAML file per vendor, validated into a frozen :class:`VendorConfig`.

Sections and their readers:

========================  ====================================================================
``source``                discovery (fsspec URL, options, include/exclude globs, ready marker)
``topics`` / ``video``    ingest and quality_pre (the contract: ``topics`` for kind mcap, ``video``
                          for kind video)
``timestamps``            ingest, quality_pre (``truth`` also transcode)
``calibration``           ingest, quality_pre
``episode_metadata``      quality_pre (ids from the path when the log has no ``episode`` record)
``ingest``                ingest (probe limits)
``quality.pre/.post``     quality_pre / quality_post
``transcode``             transcode, quality_post
``annotate``, ``shard``   annotate, shard
``schedule``, ``planner``,  the DAG factory and planner; never part of a step's config hash
``pools``, ``steps``
========================  ====================================================================

Kind-dependent defaults are filled in at validation (input globs, the video contract, clip options, the
truth stamp), so that the resolved model, what ``sluice vendor show`` prints and what is hashed, is complete.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, get_args

import fsspec
from pydantic import Field, field_validator, model_validator

from pipeline.config.contract import (
    CalibrationSource,
    Container,
    EpisodeMetadataSource,
    IngestOptions,
    QualityThresholds,
    SourceConfig,
    StampSource,
    TimestampPolicy,
    TopicContract,
    VideoCodec,
    VideoContract,
)
from pipeline.config.operations import (
    PlannerLimits,
    PoolConfig,
    Schedule,
    StepConfig,
    StepsConfig,
    check_gpu_annotators,
    check_step_pools,
    merge_pools,
)
from pipeline.config.processing import AnnotateOptions, ShardOptions, TranscodeOptions
from pipeline.config.types import FrozenModel, Lax, Loc, Slug, raise_problems
from pipeline.enums import SourceKind, StepName

#: Input globs per kind when ``source.include`` is not given.
DEFAULT_INCLUDE: dict[SourceKind, tuple[str, ...]] = {
    SourceKind.MCAP: ("**/*.mcap",),
    SourceKind.VIDEO: ("**/*.mov", "**/*.mp4"),
}


class VendorConfig(FrozenModel):
    """Everything Sluice needs to know about one vendor; see the module docstring for who reads what."""

    name: Slug = Field(description="Vendor slug: DAG id, catalog value; must equal the file name's stem.")
    description: str = Field(default="", description="Shown as the DAG's documentation.")
    owner: str = Field(default="data-platform", min_length=1, description="DAG owner.")
    tags: Annotated[tuple[Slug, ...], Lax] = Field(default=(), description="Extra DAG tags.")
    kind: Annotated[SourceKind, Lax] = Field(
        description="What the vendor delivers: mcap (robot logs) or video."
    )
    source: SourceConfig
    topics: TopicContract | None = Field(default=None, description="Topic contract; required for kind mcap.")
    video: VideoContract | None = Field(
        default=None, description="Video contract; kind video only (defaults)."
    )
    timestamps: TimestampPolicy = Field(default_factory=TimestampPolicy)
    calibration: CalibrationSource = Field(default_factory=CalibrationSource)
    episode_metadata: EpisodeMetadataSource = Field(
        default_factory=EpisodeMetadataSource,
        description="Where robot and session ids come from when a log's 'episode' record lacks them.",
    )
    ingest: IngestOptions = Field(default_factory=IngestOptions)
    quality: QualityThresholds = Field(default_factory=QualityThresholds)
    transcode: TranscodeOptions = Field(default_factory=lambda: TranscodeOptions.model_validate({}))
    annotate: AnnotateOptions = Field(default_factory=AnnotateOptions)
    shard: ShardOptions = Field(default_factory=ShardOptions)
    schedule: Schedule = Field(default_factory=Schedule)
    planner: PlannerLimits = Field(default_factory=PlannerLimits)
    pools: dict[Slug, PoolConfig] = Field(
        default_factory=lambda: {k: PoolConfig.model_validate(v) for k, v in merge_pools(None).items()},
        description="Airflow pools; cpu, io, db and gpu exist unless overridden.",
    )
    steps: StepsConfig = Field(default_factory=StepsConfig)

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        filled["pools"] = merge_pools(filled.get("pools"))
        try:
            kind = SourceKind(str(filled.get("kind")))
        except (ValueError, TypeError):
            return filled  # the kind is reported; nothing kind-dependent can be filled in
        source = filled.get("source")
        if isinstance(source, dict) and "include" not in source:
            filled["source"] = {**source, "include": list(DEFAULT_INCLUDE[kind])}
        timestamps = filled.get("timestamps", {})
        if isinstance(timestamps, dict) and "truth" not in timestamps and kind is SourceKind.VIDEO:
            filled["timestamps"] = {**timestamps, "truth": StampSource.CONTAINER.value}
        if kind is SourceKind.VIDEO:
            if "video" not in filled:
                filled["video"] = {}
            transcode = filled.get("transcode", {})
            if isinstance(transcode, dict):
                # Clips get the default options; there is no state or action stream to resample.
                filled["transcode"] = {"clips": {}, "resample_rate_hz": None, **transcode}
        return filled

    @field_validator("tags")
    @classmethod
    def _unique_tags(cls, tags: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(tags))

    @model_validator(mode="after")
    def _consistent(self) -> VendorConfig:
        problems: list[tuple[Loc, str]] = []
        if self.kind is SourceKind.MCAP:
            if self.topics is None:
                problems.append(
                    (
                        ("topics",),
                        "kind mcap needs a topic contract (cameras, state, actions; {} = container only)",
                    )
                )
            if self.video is not None:
                problems.append(
                    (("video",), "the video contract is for kind video only; this vendor is mcap")
                )
            if self.transcode.clips is not None:
                problems.append(
                    (("transcode", "clips"), "clip options are for kind video only; this vendor is mcap")
                )
            if self.timestamps.truth is StampSource.CONTAINER:
                problems.append(
                    (
                        ("timestamps", "truth"),
                        "container stamps are for kind video; allowed for mcap: hardware, log_time, "
                        "publish_time",
                    )
                )
        else:
            if self.topics is not None:
                problems.append((("topics",), "a topic contract is for kind mcap only; this vendor is video"))
            if self.timestamps.truth is not StampSource.CONTAINER:
                problems.append(
                    (("timestamps", "truth"), "kind video has only container stamps; allowed: container")
                )
        problems += check_step_pools(self.steps, self.pools)
        problems += check_gpu_annotators(self.annotate.annotators, self.steps, self.pools)
        raise_problems(problems)
        return self

    def step(self, step: StepName | str) -> StepConfig:
        """Per-step defaults (enabled, critical, pool, resources) of one step."""
        return self.steps[step]

    def source_url(self, base_dir: Path | None = None) -> str:
        """The source as an absolute URL (or absolute local path).

        A relative local path is resolved against ``base_dir``, the project root, which defaults to the
        working directory (the same rule as ``SLUICE_HOME``'s default ``.sluice``).
        """
        if not self.source.is_local:
            return self.source.url
        return str(local_source_path(self.source.url, base_dir))


#: What an ad-hoc ingest never takes for an input: hidden files, partial uploads, and the metadata a drop
#: carries beside its media (``drop.json``, ``*.meta.json``, READMEs, ready markers). None of them is a
#: robot log or a video, so taking them would only quarantine them as ``bad_magic``.
AD_HOC_EXCLUDE = (
    "**/.*",
    "**/*.part",
    "**/*.tmp",
    "**/*.json",
    "**/*.yaml",
    "**/*.yml",
    "**/*.txt",
    "**/*.md",
    "**/_READY",
)


#: How the vendors of ad-hoc ingests are named: ``adhoc_<folder>_<8 hex>``.
AD_HOC_PREFIX = "adhoc_"


def ad_hoc_vendor_name(kind: SourceKind | str, url: str) -> str:
    """The vendor an ad-hoc ingest of ``url`` as ``kind`` files its inputs under: one per folder and kind, so
    that two folders' ``e000.mcap`` are two files, not two versions of one, and a folder read as video
    does not turn another's MCAP vendor into a video one. Named after the folder (a slug), with a digest of
    the kind and the full URL."""
    digest = hashlib.sha256(f"{SourceKind(kind).value}\0{url}".encode()).hexdigest()[:8]
    folder = re.sub(r"[^a-z0-9]+", "_", url.rstrip("/").rsplit("/", 1)[-1].lower()).strip("_")
    folder = folder if folder and folder[0].isalpha() else f"d{folder}"
    return f"{AD_HOC_PREFIX}{folder[: 63 - len(AD_HOC_PREFIX) - 9]}_{digest}"


def generic_vendor(kind: SourceKind | str, url: str, *, name: str | None = None) -> VendorConfig:
    """A container-only vendor for ad-hoc ingest (``sluice ingest PATH --kind ...``), named by
    :func:`ad_hoc_vendor_name` unless ``name`` is given.

    Every file under ``url`` is an input except the drop's sidecars (:data:`AD_HOC_EXCLUDE`); no topic is
    required and any encoding, container or codec the readers know passes the contract, so only structural
    problems (truncation, CRCs, decode errors, blank video...) are judged.
    """
    kind = SourceKind(kind)
    name = name or ad_hoc_vendor_name(kind, url)
    source = {"url": url, "include": ["**/*"], "exclude": list(AD_HOC_EXCLUDE)}
    data: dict[str, Any] = {"name": name, "kind": kind.value, "source": source}
    if kind is SourceKind.MCAP:
        data["topics"] = {"message_encodings": None, "schema_encodings": None}
    else:
        data["video"] = {
            "containers": list(get_args(Container)),
            "codecs": list(get_args(VideoCodec)),
            "min_width_px": 1,
            "min_height_px": 1,
            "min_fps": 0.001,
            "max_fps": 1000.0,
        }
    return VendorConfig.model_validate(data)


def local_source_path(url: str, base_dir: Path | None = None) -> Path:
    """The absolute local folder a ``file://`` URL or a local path names (symlinks not resolved)."""
    _, path_text = fsspec.core.split_protocol(url)
    path = Path(path_text).expanduser()
    if not path.is_absolute():
        path = (base_dir if base_dir is not None else Path.cwd()) / path
    return path
