"""`miner gc`: free what no stored task needs: work folders, Docker images, and caches over a size limit.

    report = collect(store, cache_limit=20 * GB, dry_run=True)
    report.bytes()   # {"work": ..., "images": ..., "cache": ...}

What a stored task needs is read from the store: the projects its tasks were mined from (the
tasks table's project keys). Everything of a project whose crawl is running (projects.status
'running') is left alone, and so is everything the store does not know (another store's images
on a shared engine, a work folder a `miner graph` run made a moment ago):

  work    store/work/<project key>: sandboxes of projects without a task are removed; of the
          others, leftover forks (work/<key>/forks) once the project's crawl is over.
  images  Docker images labelled miner=1 (kinds healthy, stage, project: label miner.project;
          broken: label miner.healthy) of the store's projects without a task; a broken image
          is kept only when it is the snapshot of a stored task's break script.
  cache   fetched sources (store/cache/sources) and the pip cache of local sandboxes
          (store/work/cache/pip), least recently used first, until they fit the limit; sources
          of stored tasks go last.

Image sizes are the engine's: an image's size less its parent's (for broken and healthy images,
whose parent miner labels), else its size not shared with other images.

A shared cache folder (`miner crawl --cache-dir DIR`, shared across stores, crawls and the
units of one crawl) holds the same three kinds without a store to say what is needed:

    report = trim_cache(Path("~/.cache/miner/crawl"), limit=20 * GB)

  cache/sources   fetched sources (git clones, sdists, folder copies)
  work/cache/pip  pip's cache: downloaded and built wheels, index pages
  work/<key>      built healthy workspaces (the local backend's)
Leftover forks of workspaces nobody uses go first, then whole entries, least recently used
first, until the folder fits the limit. An entry a crawl uses is never removed: a unit holds
a shared lock on its workspace's `use.lock` (and a fetch the source's lock) while it works.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miner.disk import GB, human, tree_size
from miner.models import content_id
from miner.sources import cache_entry, parse_source
from miner.store import Store

KINDS = ("work", "images", "cache")
PROJECT_KEY = re.compile(r"^[0-9a-f]{16}$")
RECENT_SECONDS = 3600  # a work folder the store does not know is left alone this long (a graph run may use it)
DEFAULT_CACHE_LIMIT = 20 * GB


@dataclass
class Freed:
    """One thing removed (or, in a dry run, that would be)."""

    kind: str  # work | images | cache
    name: str
    bytes: int


@dataclass
class GcReport:
    dry_run: bool
    freed: list[Freed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def bytes(self) -> dict[str, int]:
        return {kind: sum(f.bytes for f in self.freed if f.kind == kind) for kind in KINDS}

    def count(self) -> dict[str, int]:
        return {kind: sum(1 for f in self.freed if f.kind == kind) for kind in KINDS}


@dataclass
class Needs:
    """What the store says must stay."""

    known: set[str]  # project keys the store has rows for
    tasks: set[str]  # project keys stored tasks come from
    running: set[str]  # project keys whose crawl is running
    break_scripts: dict[str, list[str]]  # project key -> break scripts of its tasks
    task_sources: list[Any]  # Source of every stored task
    running_sources: list[Any]  # Source of every running project (None when its line no longer parses)

    @property
    def keep(self) -> set[str]:
        return self.tasks | self.running


def read_needs(store: Store) -> Needs:
    projects = store.projects()
    running = [p for p in projects if p["status"] == "running"]
    tasks = store.list_tasks()
    scripts: dict[str, list[str]] = {}
    for task in tasks:
        scripts.setdefault(content_id(task.repo, task.commit, task.source.overrides), []).append(task.break_script)
    return Needs(known={p["key"] for p in projects}, tasks=store.task_project_keys(),
                 running={p["key"] for p in running},
                 break_scripts=scripts, task_sources=[t.source for t in tasks],
                 running_sources=[_source_of(p) for p in running])


def _source_of(row: dict[str, Any]) -> Any:
    """The Source of a project row, parsed again from its line (relative folders from its repos file)."""
    base = Path(row["origin"].rsplit(":", 1)[0]).parent if row["origin"] else Path.cwd()
    try:
        return parse_source(row["source_raw"], base)
    except ValueError:
        return None


def collect(store: Store, cache_limit: int = DEFAULT_CACHE_LIMIT, dry_run: bool = False,
            client: Any = None, images: bool = True) -> GcReport:
    """Free (or, with dry_run, list) what no stored task needs; see the module docstring."""
    report, needs = GcReport(dry_run=dry_run), read_needs(store)
    if needs.running:
        report.notes.append(f"{len(needs.running)} project(s) marked running were left alone "
                            "(a crawl is on, or was killed: crawl again to finish it)")
    collect_work(store.work_root, needs, report)
    if images:
        collect_images(client, needs, report)
    collect_cache(store, needs, cache_limit, report)
    return report


# -- work folders -----------------------------------------------------------------------------


def collect_work(work: Path, needs: Needs, report: GcReport) -> None:
    if not work.is_dir():
        return
    for entry in sorted(work.iterdir()):
        if not entry.is_dir() or entry.is_symlink() or not PROJECT_KEY.match(entry.name):
            continue  # work/cache (the pip cache) and anything miner did not name
        key = entry.name
        if key in needs.running:
            continue
        if key in needs.tasks:
            forks = entry / "forks"
            for fork in sorted(forks.iterdir()) if forks.is_dir() else []:
                _free(report, "work", fork, f"{key}/forks/{fork.name}")
            continue
        if key not in needs.known and time.time() - _last_change(entry) < RECENT_SECONDS:
            report.notes.append(f"work/{key} is not a project of this store and changed in the last hour: left alone")
            continue
        _free(report, "work", entry, key)


def _last_change(folder: Path) -> float:
    times = [folder.stat().st_mtime]
    times += [child.lstat().st_mtime for child in folder.iterdir()]
    return max(times)


def _free(report: GcReport, kind: str, path: Path, name: str) -> None:
    size = tree_size(path)
    if not report.dry_run:
        remove_path(path)
    report.freed.append(Freed(kind, name, size))


def remove_path(path: Path) -> None:
    """Remove a file or folder, even one a break script left without permissions."""
    def retry(func: Callable[..., Any], target: str, _info: Any) -> None:
        for item in (os.path.dirname(target), target):
            if os.path.isdir(item) and not os.path.islink(item):
                os.chmod(item, os.stat(item).st_mode | stat.S_IRWXU)
        func(target)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=retry)  # onexc is 3.12+
    else:
        path.unlink(missing_ok=True)


# -- Docker images ----------------------------------------------------------------------------


def collect_images(client: Any, needs: Needs, report: GcReport) -> None:
    """Remove the store's images that no stored task needs (broken snapshots first, then their parents)."""
    from miner.sandbox.docker import images as imagelib
    from miner.sandbox.base import BackendUnavailable

    if client is None:
        try:
            client = imagelib.docker_client(timeout=30)
        except BackendUnavailable:
            report.notes.append("no Docker engine answers: images were not looked at")
            return
    found = client.images.list(filters={"label": f"{imagelib.LABEL}=1"})
    owner = {image.id: (image.labels or {}).get("miner.project", "") for image in found}
    wanted = _wanted_broken_tags(found, needs)
    doomed, foreign = [], 0
    for image in found:
        labels = image.labels or {}
        kind = labels.get(imagelib.KIND, "")
        key = owner.get(labels.get("miner.healthy", ""), "") if kind == "broken" else labels.get("miner.project", "")
        if kind not in ("healthy", "stage", "project", "broken") or not key:
            continue
        if key not in needs.known:
            foreign += 1
        elif key in needs.running or (key in needs.tasks and (kind != "broken" or set(image.tags) & wanted)):
            continue
        else:
            doomed.append(image)
    if foreign:
        report.notes.append(f"{foreign} image(s) of projects this store does not know were left alone")
    order = {"broken": 0, "healthy": 1, "project": 2, "stage": 3}
    sizes = _ImageSizes(client)
    # The engine lists images built in one second in no fixed order: the name breaks ties.
    for image in sorted(doomed, key=lambda i: (order[(i.labels or {}).get(imagelib.KIND, "")], sorted(i.tags), i.id)):
        name = ", ".join(image.tags) or image.short_id
        size = sizes.unique(image)
        if not report.dry_run and not _remove_image(client, image, report):
            continue
        report.freed.append(Freed("images", name, size))


def _wanted_broken_tags(found: list[Any], needs: Needs) -> set[str]:
    """Tags of the broken snapshots of stored tasks (as images.build_broken_image names them)."""
    tags = set()
    for image in found:
        labels = image.labels or {}
        if labels.get("miner.kind") == "healthy" and labels.get("miner.project") in needs.tasks:
            for script in needs.break_scripts.get(labels["miner.project"], []):
                tags.add(f"miner/broken-{content_id(image.id, script)}:latest")
    return tags


def _remove_image(client: Any, image: Any, report: GcReport) -> bool:
    import docker.errors

    try:
        for ref in image.tags or [image.id]:
            client.images.remove(ref, force=False)
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as exc:
        reason = str(exc.explanation or exc).splitlines()[0][:120]
        report.notes.append(f"image {', '.join(image.tags) or image.short_id} was kept: {reason}")
        return False
    return True


class _ImageSizes:
    """Bytes an image holds beyond its parent (a labelled one), else beyond what it shares."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._df: dict[str, tuple[int, int]] | None = None

    def unique(self, image: Any) -> int:
        labels = image.labels or {}
        parent_ref = labels.get("miner.healthy") or labels.get("miner.base")
        size = int(image.attrs.get("Size", 0))
        if parent_ref:
            from miner.sandbox.docker.images import find_image

            parent = find_image(self.client, parent_ref)
            if parent is not None:
                return max(0, size - int(parent.attrs.get("Size", 0)))
        total, shared = self.df().get(image.id, (size, 0))
        return max(0, total - max(shared, 0))

    def df(self) -> dict[str, tuple[int, int]]:
        if self._df is None:
            try:
                rows = self.client.df().get("Images") or []
            except Exception:  # the engine's disk-usage call is slow or refused: fall back to sizes
                rows = []
            self._df = {row["Id"]: (int(row.get("Size", 0)), int(row.get("SharedSize", 0))) for row in rows}
        return self._df


# -- caches -----------------------------------------------------------------------------------


@dataclass
class CacheEntry:
    path: Path
    name: str
    size: int
    used: float  # last use (the entry's lock file is rewritten on every fetch)
    lock: Path | None = None
    for_task: bool = False


def collect_cache(store: Store, needs: Needs, limit: int, report: GcReport) -> None:
    """Evict cached sources and pip files, least recently used first, until they fit `limit` bytes."""
    sources = store.cache_root / "sources"
    entries = _source_entries(sources, needs, report)
    if needs.running:
        report.notes.append("the pip cache was not trimmed while a crawl is running")
    else:
        entries += _pip_entries(store.work_root / "cache" / "pip")
    _evict_over(sorted(entries, key=lambda e: (e.for_task, e.used)), limit, report, "cache/")


def _source_entries(root: Path, needs: Needs, report: GcReport) -> list[CacheEntry]:
    if not root.is_dir():
        return []
    if None in needs.running_sources:
        report.notes.append("fetched sources were not trimmed: a running project's source line no longer parses")
        return []
    protected = {cache_entry(s, root) for s in needs.running_sources}
    for_tasks = set()
    for source in needs.task_sources:
        try:
            for_tasks.add(cache_entry(source, root))
        except ValueError:
            continue
    return _list_sources(root, protected, for_tasks)


def _list_sources(root: Path, protected: set[Path], for_tasks: set[Path]) -> list[CacheEntry]:
    entries = []
    for kind in ("git", "local", "pypi"):
        folder = root / kind
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if not path.is_dir() or path.name.startswith(".") or path in protected:
                continue
            lock = path.with_suffix(".lock")
            used = max(path.stat().st_mtime, lock.stat().st_mtime if lock.exists() else 0.0)
            entries.append(CacheEntry(path, f"sources/{kind}/{path.name}", tree_size(path), used, lock,
                                      path in for_tasks))
    return entries


def _pip_entries(root: Path) -> list[CacheEntry]:
    entries = []
    for folder, _dirs, files in os.walk(root) if root.is_dir() else []:
        for name in files:
            path = Path(folder) / name
            info = path.lstat()
            entries.append(CacheEntry(path, f"pip/{path.relative_to(root)}", info.st_size, info.st_mtime))
    return entries


def _evict(entry: CacheEntry) -> bool:
    """Remove a cache entry under its lock (False when a fetch holds it now)."""
    if entry.lock is None:
        remove_path(entry.path)
        return True
    with open(entry.lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            remove_path(entry.path)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    entry.lock.unlink(missing_ok=True)
    return True


def summary(report: GcReport) -> str:
    """One line: how much was (or would be) freed, by kind."""
    sizes, counts = report.bytes(), report.count()
    verb = "would free" if report.dry_run else "freed"
    parts = [f"{kind} {human(sizes[kind])} ({counts[kind]})" for kind in KINDS]
    return f"{verb} {human(sum(sizes.values()))}: " + ", ".join(parts)


# -- a shared cache folder ----------------------------------------------------------------------

USE_LOCK = "use.lock"  # in a workspace folder: held (shared) by every unit that mines from it
TRIM_STAMP = ".trimmed"  # in a cache folder: when it was last trimmed
TRIM_EVERY = 300.0  # seconds between the trims units do at their end


def trim_cache(root: Path, limit: int, dry_run: bool = False) -> GcReport:
    """Free a shared cache folder down to `limit` bytes (see the module docstring)."""
    report = GcReport(dry_run=dry_run)
    root = Path(root)
    if not root.is_dir():
        return report
    with open(root / ".trim.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report.notes.append(f"{root} is being trimmed by another process: left to it")
            return report
        _trim(root, limit, report)
    return report


def _trim(root: Path, limit: int, report: GcReport) -> None:
    workspaces = _workspace_entries(root / "work")
    for entry in workspaces:
        _free_forks(entry, report)
    entries = _list_sources(root / "cache" / "sources", set(), set()) + _pip_entries(root / "work" / "cache" / "pip")
    entries += workspaces
    _evict_over(sorted(entries, key=lambda e: e.used), limit, report)
    if not report.dry_run:
        (root / TRIM_STAMP).touch()


def trim_due(root: Path) -> bool:
    """Whether a cache folder was not trimmed in the last TRIM_EVERY seconds."""
    stamp = Path(root) / TRIM_STAMP
    return not stamp.exists() or time.time() - stamp.stat().st_mtime > TRIM_EVERY


def _workspace_entries(work: Path) -> list[CacheEntry]:
    entries = []
    for path in sorted(work.iterdir()) if work.is_dir() else []:
        if not path.is_dir() or path.is_symlink() or not PROJECT_KEY.match(path.name):
            continue
        marks = [m for m in (path / USE_LOCK, path / "build.json") if m.exists()] or [path]
        used = max(m.stat().st_mtime for m in marks)
        entries.append(CacheEntry(path, f"work/{path.name}", tree_size(path), used, path / USE_LOCK))
    return entries


def _free_forks(entry: CacheEntry, report: GcReport) -> None:
    """Forks left in a workspace nobody uses now (a unit killed mid-candidate leaves its fork)."""
    forks = entry.path / "forks"
    if not forks.is_dir() or entry.lock is None:
        return
    with open(entry.lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        for fork in sorted(forks.iterdir()):
            size = tree_size(fork)
            if not report.dry_run:
                remove_path(fork)
            entry.size -= size
            report.freed.append(Freed("cache", f"{entry.name}/forks/{fork.name}", size))


def _evict_over(entries: list, limit: int, report: GcReport, label: str = "") -> None:
    """Evict `entries` in their order until what is left fits in `limit` bytes (in-use ones are kept)."""
    total = sum(e.size for e in entries)
    for entry in entries:
        if total <= limit:
            break
        if not report.dry_run and not _evict(entry):
            report.notes.append(f"{label}{entry.name} is in use: kept")
            continue
        total -= entry.size
        report.freed.append(Freed("cache", entry.name, entry.size))
