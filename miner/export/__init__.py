"""Exporters: stored tasks -> Harbor (Terminal-Bench 2.0), Terminal-Bench 1.0, JSON Lines or a hub dataset.

    summary = export_tasks(store, select_tasks(store, ["deps"]), "harbor", Path("out"), ExportOptions())

Modules: common.py (what every format shares: the build context, written with the Docker
backend's image layout, the verifier's files, the task sources), archive.py (deterministic project
archives), dockerized.py (a project's own Dockerfile rewritten), registry.py (formats register
themselves by name), exporter.py (the bulk export), one module per format: harbor.py, tb1.py,
jsonl.py, hf.py (a dataset hub's rows over Harbor folders), and what Harbor folders can carry:
dataset.py (the registry's dataset.toml by task digest, and the dataset card), images.py
(pre-built task images named by digest, pushed or archived).
"""

from miner.export.common import DEFAULT_BASE_IMAGE, DEFAULT_ORG, ExportError, ExportOptions, task_slug
from miner.export.exporter import ExportSummary, TaskOutcome, export_tasks, select_tasks
from miner.export.registry import names

FORMATS = names()

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
