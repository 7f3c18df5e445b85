"""Media helpers shared by the synthetic drops, the probes and the transcode checks.

:mod:`pipeline.media.framecode` draws a frame index into the pixels of a frame as a block code that
survives lossy H.264, and reads it back after decode.
"""
