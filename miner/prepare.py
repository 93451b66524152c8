"""The one path from a source to its healthy state: fetch -> install spec -> build -> measure.

    project, healthy = prepare(source, store, "local", timeout=600.0, say=print)

With a store, a healthy state it already recorded for the project is reused; without one (None),
fetched sources and builds go to miner's user cache (~/.cache/miner or $XDG_CACHE_HOME/miner)
and nothing is recorded. Any failure to fetch, build or measure is a PrepareError whose message
names the source and the reason.

(This is the body `miner graph` used until now; the crawl, `replay` and `export` still have their
own copies, to be folded in here.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from miner.healthy import SkipProject, measure_project
from miner.install import build_spec
from miner.models import HealthyState, Project, Source
from miner.sandbox import get_backend
from miner.sandbox.base import SandboxError
from miner.sources import FetchError, fetch
from miner.store import Store


class PrepareError(Exception):
    """The source could not be fetched, built or measured; the message says why."""


def user_cache() -> Path:
    """miner's cache folder when no store is in use."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "miner"


def prepare(source: Source, store: Store | None, backend_name: str, timeout: float,
            say: Callable[[str], None]) -> tuple[Project, HealthyState]:
    """The fetched project and its healthy state: recorded in the store, else measured now in a
    sandbox of the named backend (which reuses a build it already made for the same project)."""
    cache = store.cache_root if store is not None else user_cache()
    work = store.work_root if store is not None else user_cache() / "work"
    try:
        say(f"fetching {source.raw}")
        project = fetch(source, cache / "sources")
        recorded = store.healthy(project.key) if store is not None else None
        return project, recorded or _measure(project, work / project.key, backend_name, timeout, say)
    except (FetchError, SkipProject, SandboxError) as exc:
        log = getattr(exc, "log", "")
        raise PrepareError(f"{source.raw}: {exc}" + (f" | {log.strip()[-300:]}" if log else "")) from None


def _measure(project: Project, workdir: Path, backend_name: str, timeout: float,
             say: Callable[[str], None]) -> HealthyState:
    backend = get_backend(backend_name)
    spec = build_spec(project, backend=backend.name)
    say(f"building {project.repo} ({backend.name} sandbox)")
    env = backend.build(project, spec, workdir)
    say("recording the healthy state (the test suite runs twice)")
    return measure_project(backend, env, project, spec, timeout)[0]
