"""The LeRobot v3.0 dataset layout as named constants (read from lerobot's own ``datasets/utils.py``).

meta/info.json                                   schema, fps, totals, path templates
meta/stats.json                                  per-feature statistics over the whole dataset
meta/tasks.parquet                               task text (index) -> task_index
meta/episodes/chunk-000/file-000.parquet         one row per episode: length, ranges, per-episode stats
data/chunk-000/file-000.parquet                  one row per frame
videos/<video key>/chunk-000/file-000.mp4        every episode of one camera, back to back
"""

from __future__ import annotations

from typing import Final

CODEBASE_VERSION: Final = "v3.0"
CHUNK_FILE: Final = "chunk-{chunk_index:03d}/file-{file_index:03d}"
INFO_PATH: Final = "meta/info.json"
STATS_PATH: Final = "meta/stats.json"
TASKS_PATH: Final = "meta/tasks.parquet"
EPISODES_PATH: Final = "meta/episodes/" + CHUNK_FILE + ".parquet"
DATA_PATH: Final = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH: Final = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
REPORT_PATH: Final = "sluice_export_report.json"
#: lerobot's defaults: files per chunk folder, and the size at which it starts a new data or video file.
CHUNKS_SIZE: Final = 1000
DATA_FILES_SIZE_IN_MB: Final = 100
VIDEO_FILES_SIZE_IN_MB: Final = 500
STATE_KEY: Final = "observation.state"
ACTION_KEY: Final = "action"
IMAGE_PREFIX: Final = "observation.images."
DEFAULT_FEATURES: Final = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
