"""Export formats register themselves here; the exporter looks them up by name.

A format is a class of one of two kinds, registered with the decorator:

    @register("harbor")
    class Harbor(FolderFormat):          # one folder per task
        def task_files(self, ts, options, pip, manifests) -> dict[str, bytes]: ...
        def finish(self, out, options) -> Path | None: ...   # optional: files about the whole folder

    @register("jsonl")
    class JsonLines(RecordsFormat):      # one record per task, all in one file
        file_name = "tasks.jsonl"
        def task_record(self, ts, options) -> dict: ...
        def write_records(self, path, records, overwrite) -> dict[str, str]: ...

`names()` and `get()` first import every module of this package once (each registers what it
defines), so adding a format is adding a module: nothing imports a format by name.
"""

from __future__ import annotations

import abc
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from miner.export.common import ExportOptions, ManifestCache, PipForwarding, TaskSource


class FolderFormat(abc.ABC):
    """A format writing one folder per task."""

    @abc.abstractmethod
    def task_files(self, ts: TaskSource, options: ExportOptions, pip: PipForwarding,
                   manifests: ManifestCache) -> dict[str, bytes]:
        """Every file of the task's folder, by folder-relative path."""

    def task_root(self, out: Path) -> Path:
        """Where the task folders go in the output folder."""
        return out

    def finish(self, out: Path, options: ExportOptions) -> Path | None:
        """After the tasks: the files describing the whole output folder (a dataset's manifest,
        rows, card), built from the folders on disk; the main one written, or None."""
        return None


class RecordsFormat(abc.ABC):
    """A format writing one record per task into one file of the output folder."""

    file_name: str

    @abc.abstractmethod
    def task_record(self, ts: TaskSource, options: ExportOptions) -> dict:
        """The record of one task."""

    @abc.abstractmethod
    def write_records(self, path: Path, records: list[dict], overwrite: bool) -> dict[str, str]:
        """Merge records into the file; {record key: written | updated | unchanged | kept}."""


Format = FolderFormat | RecordsFormat
F = TypeVar("F", bound=type)
_FORMATS: dict[str, Format] = {}
_LOADED = False


def register(name: str) -> Callable[[F], F]:
    """Class decorator: make the format known under `name`."""

    def add(cls: F) -> F:
        _FORMATS[name] = cls()
        return cls

    return add


def _load() -> None:
    """Import every module of the package once, so each format has registered itself."""
    global _LOADED
    if _LOADED:
        return
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{info.name}")
    _LOADED = True


def names() -> tuple[str, ...]:
    """The registered formats' names, in registration order."""
    _load()
    return tuple(_FORMATS)


def get(name: str) -> Format:
    """The format called `name`; ValueError naming the choices when there is none."""
    _load()
    if name not in _FORMATS:
        raise ValueError(f"unknown export format {name!r}; choose one of {', '.join(_FORMATS)}")
    return _FORMATS[name]
