"""The training-side sample reader for transcoded episodes (no Airflow, no Ray).

with open_episode("derived/transcode/<hash>/<episode>/episode.mcap") as reader:
    sample = reader.sample(t_ns)          # 2 s of state/actions, 2 frames per camera
    sample.proprio["/robot/joint_states/resampled"], sample.frames["front"][-1].image
    sample.counters.read_amplification

with SampleLoader(manifest, batch_size=32, workers=4, prefetch=4, seed=rank) as loader:
    for step, batch in zip(range(steps), loader):   # batch: a list of Sample
        ...
"""

from pipeline.reader.counters import ReadCounters
from pipeline.reader.index import EpisodeIndex, EpisodeIndexError, build_index
from pipeline.reader.loader import (
    EpisodeRow,
    LoaderArgumentError,
    LoaderClosedError,
    LoaderWorkerDiedError,
    SampleBatch,
    SampleLoader,
    SampleLoaderError,
    SampleReadError,
    UnsupportedRowsError,
)
from pipeline.reader.sample import (
    CameraFrame,
    EpisodeReader,
    FrameDecodeError,
    Sample,
    SampleArgumentError,
    open_episode,
)

__all__ = [
    "CameraFrame",
    "EpisodeIndex",
    "EpisodeIndexError",
    "EpisodeReader",
    "EpisodeRow",
    "FrameDecodeError",
    "LoaderArgumentError",
    "LoaderClosedError",
    "LoaderWorkerDiedError",
    "ReadCounters",
    "Sample",
    "SampleArgumentError",
    "SampleBatch",
    "SampleLoader",
    "SampleLoaderError",
    "SampleReadError",
    "UnsupportedRowsError",
    "build_index",
    "open_episode",
]
