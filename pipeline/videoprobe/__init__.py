"""Sandboxed video probing: measure a vendor video with PyAV in a locked-down worker process.

``probe_video(path, limits=...)`` returns a :class:`VideoProbe` (JSON-serialisable, stored in the catalog)
with coded :class:`VideoFinding` s; a bad file never raises. See :mod:`.prober` for the sandbox.
"""

from pipeline.videoprobe.config import CONTAINER_FAMILIES, VideoProbeLimits
from pipeline.videoprobe.errors import ProbeTargetUnreadableError, ProbeWorkerError
from pipeline.videoprobe.findings import derive_findings
from pipeline.videoprobe.model import VideoFinding, VideoProbe
from pipeline.videoprobe.prober import VideoProber, probe_video, probe_videos

__all__ = [
    "CONTAINER_FAMILIES",
    "ProbeTargetUnreadableError",
    "ProbeWorkerError",
    "VideoFinding",
    "VideoProbe",
    "VideoProbeLimits",
    "VideoProber",
    "derive_findings",
    "probe_video",
    "probe_videos",
]
