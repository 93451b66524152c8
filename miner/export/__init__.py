"""Exporters: stored tasks -> Harbor (Terminal-Bench 2.0), Terminal-Bench 1.0 or JSON Lines.

    summary = export_tasks(store, store.list_tasks("deps"), "harbor", Path("out"), ExportOptions())

See miner.export.common for the shared build context and verifier, and harbor.py, tb1.py,
jsonl.py for each format's files.
"""

from miner.export.common import (
    DEFAULT_BASE_IMAGE,
    DEFAULT_ORG,
    FORMATS,
    ExportError,
    ExportOptions,
    ExportSummary,
    TaskOutcome,
    export_tasks,
    select_tasks,
    task_slug,
)

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "DEFAULT_ORG",
    "FORMATS",
    "ExportError",
    "ExportOptions",
    "ExportSummary",
    "TaskOutcome",
    "export_tasks",
    "select_tasks",
    "task_slug",
]
