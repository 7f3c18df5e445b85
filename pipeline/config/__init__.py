"""Vendor configuration: frozen models, a hostile-safe loader and canonical config hashes.

A vendor is one YAML file (``dags/vendors/<name>.yaml`` by default). Typical use::

    from pipeline.config import load_vendor, step_config_hash
    vendor = load_vendor(Path("dags/vendors/acme_robotics.yaml"))
    vendor.steps[StepName.TRANSCODE].resources.cpus
    step_config_hash(vendor, StepName.TRANSCODE)   # stored with every transcode output
"""

from __future__ import annotations

from pipeline.config.contract import (
    CalibrationSource,
    CameraSpec,
    EpisodeMetadataSource,
    IngestOptions,
    QualityPost,
    QualityPre,
    QualityThresholds,
    SeriesSpec,
    SourceConfig,
    StampSource,
    TimestampPolicy,
    TopicContract,
    TopicSpec,
    VideoContract,
)
from pipeline.config.hashing import (
    CONFIG_FORMAT_VERSION,
    STEP_READS,
    canonical_json,
    config_hash,
    step_config_hash,
    step_config_hashes,
)
from pipeline.config.loader import MAX_CONFIG_BYTES, load_vendor, load_vendors, read_config_text
from pipeline.config.models import VendorConfig, generic_vendor
from pipeline.config.operations import (
    DEFAULT_POOLS,
    STEP_DEFAULTS,
    PlannerLimits,
    PoolConfig,
    Resources,
    Schedule,
    StepConfig,
    StepsConfig,
)
from pipeline.config.processing import (
    PROFILE_DEFAULTS,
    AnnotateOptions,
    AnnotatorConfig,
    ChunkTargets,
    ClipOptions,
    ShardOptions,
    TrainingProfile,
    TranscodeOptions,
)

__all__ = [
    "CONFIG_FORMAT_VERSION",
    "DEFAULT_POOLS",
    "MAX_CONFIG_BYTES",
    "PROFILE_DEFAULTS",
    "STEP_DEFAULTS",
    "STEP_READS",
    "AnnotateOptions",
    "AnnotatorConfig",
    "CalibrationSource",
    "CameraSpec",
    "ChunkTargets",
    "ClipOptions",
    "EpisodeMetadataSource",
    "IngestOptions",
    "PlannerLimits",
    "PoolConfig",
    "QualityPost",
    "QualityPre",
    "QualityThresholds",
    "Resources",
    "Schedule",
    "SeriesSpec",
    "ShardOptions",
    "SourceConfig",
    "StampSource",
    "StepConfig",
    "StepsConfig",
    "TimestampPolicy",
    "TopicContract",
    "TopicSpec",
    "TrainingProfile",
    "TranscodeOptions",
    "VendorConfig",
    "VideoContract",
    "canonical_json",
    "config_hash",
    "generic_vendor",
    "load_vendor",
    "load_vendors",
    "read_config_text",
    "step_config_hash",
    "step_config_hashes",
]
