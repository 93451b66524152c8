"""The one path from a source to a built sandbox and its healthy state.

Every verb that needs a project's healthy environment goes through here: the crawl, `miner
graph`, `miner replay`, the exporters (which need the pinned project and its recorded state,
not a sandbox) and the benchmarks.

    prepared = prepare(source, backend, store, commit=None, timeout=600.0, say=print)
    prepared.project   the fetched files, pinned to `commit` when one is given
    prepared.env       the built healthy environment (a workspace or an image) to fork
    prepared.state     its HealthyState: reused from the store when it was measured for the same
                       source, commit, backend, install spec and miner version; else measured
                       now (the suite runs twice) and recorded
    prepared.reused    whether the state came from the store

`fetch_pinned` is the fetch half alone: a source at the commit a task was mined at, or a clear
`PinError` saying why that commit cannot be had any more (a folder whose content changed and
whose old copy is gone, a commit no branch of the remote reaches).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from miner import __version__
from miner.healthy import measure_project
from miner.ecosystems import build_spec
from miner.models import HealthyState, Project, Source, content_id
from miner.sandbox.base import Backend, BuildSpec, Healthy
from miner.sources import FetchError, fetch, cache_entry
from miner.store import Store
from miner.timing import Clock, timed

Say = Callable[[str], None]


class States(Protocol):
    """Where prepare() finds and keeps healthy states: the store, or a unit's view of it (miner.mine)."""

    root: Path

    def recorded_state(self, key: str) -> HealthyState | None: ...

    def record_state(self, key: str, state: HealthyState) -> None: ...


class PinError(FetchError):
    """The source no longer resolves to the commit asked for, and that commit cannot be fetched."""


@dataclass
class Prepared:
    """A project ready to be broken: its files, build recipe, healthy environment and state."""

    project: Project
    spec: BuildSpec
    env: Healthy
    state: HealthyState | None  # None only when the caller asked not to measure (measure=False)
    backend: Backend
    reused: bool = False


def _pinned(source: Source, commit: str) -> Source:
    """The source asking for exactly `commit` where its kind can (a git ref); others as they are."""
    if source.kind == "git":
        return source.model_copy(update={"ref": commit})
    return source


def fetch_pinned(source: Source, cache: Path, commit: str | None = None) -> Project:
    """Fetch a source; with `commit`, exactly that revision or PinError saying why not."""
    if commit is None:
        return fetch(source, cache)
    if source.kind == "local":
        kept = _cached_folder(source, cache, commit)
        if kept is not None:
            return kept
    try:
        project = fetch(_pinned(source, commit), cache)
    except FetchError as exc:
        raise PinError(f"{source.raw}: the commit the task was mined at ({commit[:12]}) cannot be fetched: {exc}") \
            from None
    if project.commit != commit:
        what = "the folder now holds other content" if source.kind == "local" else "the source now resolves elsewhere"
        raise PinError(f"{source.raw}: {what} ({project.commit[:12]}); the task was mined at {commit[:12]} "
                       "and that revision is no longer available")
    return project.model_copy(update={"source": source})


def _cached_folder(source: Source, cache: Path, commit: str) -> Project | None:
    """A folder source's earlier copy at `commit`, if the fetch cache still holds it."""
    checkout = cache_entry(source, Path(cache).resolve()) / commit
    if not checkout.is_dir():
        return None
    return Project(source=source, repo=str(Path(source.location)), commit=commit, path=checkout)


def state_key(project: Project, backend: str, spec: BuildSpec) -> str:
    """What a recorded healthy state depends on: reuse it only when all of this is unchanged."""
    return content_id(project.repo, project.commit, project.source.overrides, backend, spec.python,
                      spec.install_script, spec.env, __version__)


def prepare(source: Source, backend: Backend, store: Store | States | None, *, commit: str | None = None,
            timeout: float = 600.0, work: Path | None = None, say: Say | None = None,
            on_project: Callable[[Project], None] | None = None, measure: bool = True,
            clock: Clock | None = None, parallel: bool = False) -> Prepared:
    """Fetch (pinned when `commit` is given), build and measure (or reuse) a project's healthy state.

    `store` None keeps nothing: the work happens in `work` (a temporary folder by default is the
    caller's business: pass one). `on_project` hears of the fetched project before it is built.
    With `measure` False, a state that is not recorded yet is not measured either (state None).
    `clock` times the phases fetch, build and healthy; with `parallel`, the healthy suite's two
    runs happen at the same time (a spare core).
    Raises FetchError/PinError, BuildError, SkipProject.
    """
    say = say or (lambda text: None)
    root = store.root if store is not None else Path(work or tempfile.mkdtemp(prefix="miner-prepare-"))
    say(f"fetching {source.raw}")
    with timed(clock, "fetch"):
        project = fetch_pinned(source, root / "cache" / "sources", commit)
    if on_project is not None:
        on_project(project)
    spec = build_spec(project, backend=backend.name)
    say(f"building ({backend.name} sandbox)")
    with timed(clock, "build"):
        env = backend.build(project, spec, root / "work" / project.key)
    key = state_key(project, backend.name, spec)
    state = store.recorded_state(key) if store is not None else None
    if state is not None:
        say("healthy state reused from the store")
        return Prepared(project, spec, env, state, backend, reused=True)
    if not measure:
        return Prepared(project, spec, env, None, backend)
    say("recording the healthy state (the test suite runs twice)")
    timeout = float(project.source.overrides.get("timeout", timeout))
    with timed(clock, "healthy"):
        state = measure_project(backend, env, project, spec, timeout, parallel=parallel)
    if store is not None:
        store.record_state(key, state)
    return Prepared(project, spec, env, state, backend)
