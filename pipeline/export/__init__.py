"""Exports of dataset versions to other tools' formats: LeRobot v3.0 (:func:`export_dataset_version`)."""

from pipeline.export.lerobot import (
    ExportError,
    ExportReport,
    check_export,
    export_dataset_version,
    write_lerobot,
)

__all__ = ["ExportError", "ExportReport", "check_export", "export_dataset_version", "write_lerobot"]
