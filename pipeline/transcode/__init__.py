"""Transcode: raw inputs into training-shaped outputs.

* robot logs (:func:`transcode_episode`): one MCAP per episode with cameras re-encoded per training profile
  as ``foxglove.CompressedVideo``, state and actions resampled once, topic groups in chunks of their own
  (:mod:`pipeline.transcode.layout`);
* vendor videos (:func:`pipeline.transcode.clips.transform_video`): upright, deinterlaced, cropped, scaled,
  constant-rate MP4 clips split at scene cuts;
* the post-gate's checks (:func:`pipeline.transcode.postgate.check_episode`,
  :func:`pipeline.transcode.clipgate.check_clips`).
"""

from pipeline.transcode.errors import OutputVerifyError, PublishError, TranscodeInputError
from pipeline.transcode.profiles import EncoderSettings, fit_size
from pipeline.transcode.robot import (
    Provenance,
    RobotTranscodeConfig,
    TranscodeResult,
    transcode_episode,
)

__all__ = [
    "EncoderSettings",
    "OutputVerifyError",
    "Provenance",
    "PublishError",
    "RobotTranscodeConfig",
    "TranscodeInputError",
    "TranscodeResult",
    "fit_size",
    "transcode_episode",
]
