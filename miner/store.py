"""The store: a SQLite index plus one folder per task, safe to crash and to share.

Layout under the store root (default ./mined):

    miner.db                 SQLite (WAL): projects, candidates, tasks
    tasks/<task_id>/         one folder per validated task (task.json, break.sh, fix.sh, ...)
    work/                    sandboxes of the other stages
    cache/                   fetched sources, pip cache

A task folder is written under tasks/.tmp-<id>-<nonce>, fsynced, and renamed into place while
the database write lock is held; the row is committed only after the rename. So a row always
has its folder, and a crash (even kill -9) can leave only a temporary folder or a folder
without a row. `recover()` (run on every open, under the same lock) removes both, so crawling
again re-creates those tasks without duplicates.

The store calls nothing of miner above miner.models.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from miner.models import Candidate, HealthyState, Task, content_id

DEFAULT_ROOT = Path("mined")
DB_NAME = "miner.db"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 120_000  # writers queue behind a task folder being fsynced
TMP_PREFIX = ".tmp-"
PROJECT_STATUSES = ("mined", "skipped", "running")
ADDED_COLUMNS = (("projects", "timings_json", "TEXT"), ("candidates", "timings_json", "TEXT"))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS projects (
    key TEXT PRIMARY KEY,
    repo TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    source_raw TEXT NOT NULL DEFAULT '',
    origin TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL CHECK (status IN ('mined', 'skipped', 'running')),
    reason TEXT NOT NULL DEFAULT '',
    healthy_json TEXT,
    started TEXT,
    finished TEXT,
    seconds REAL NOT NULL DEFAULT 0,
    timings_json TEXT  -- phase -> seconds before the candidates (miner.timing.PROJECT_PHASES)
);
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY,
    project_key TEXT NOT NULL,
    repo TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    type_id TEXT NOT NULL,
    family TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('validated', 'rejected')),
    rule TEXT,
    detail TEXT NOT NULL DEFAULT '',
    suite_runs REAL NOT NULL DEFAULT 0,  -- partial runs count as fractions
    seconds REAL NOT NULL DEFAULT 0,
    predicted_f2p_json TEXT,
    f2p_json TEXT NOT NULL DEFAULT '[]',
    graph_depth INTEGER,
    created TEXT NOT NULL,
    timings_json TEXT  -- phase -> seconds (miner.timing.CANDIDATE_PHASES)
);
CREATE INDEX IF NOT EXISTS candidates_project ON candidates (project_key);
CREATE INDEX IF NOT EXISTS candidates_type ON candidates (type_id);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    project_key TEXT NOT NULL,
    repo TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    type_id TEXT NOT NULL,
    family TEXT NOT NULL,
    target TEXT NOT NULL,
    difficulty TEXT NOT NULL,
    created TEXT NOT NULL,
    task_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_type ON tasks (type_id);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project_key TEXT NOT NULL DEFAULT '',
    repo TEXT NOT NULL DEFAULT '',
    purpose TEXT NOT NULL DEFAULT 'agent',  -- agent | learn | instruction
    goal TEXT NOT NULL DEFAULT '',
    round INTEGER NOT NULL DEFAULT 0,
    candidate_id TEXT,  -- the submission this call led to (NULL: none)
    model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,  -- 0 when answered from the cache
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    latency REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    cached INTEGER NOT NULL DEFAULT 0,
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_calls_candidate ON llm_calls (candidate_id);
CREATE TABLE IF NOT EXISTS healthy_states (
    key TEXT PRIMARY KEY,  -- source, commit, backend, install spec, miner version (prepare.state_key)
    repo TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    backend TEXT NOT NULL,
    state_json TEXT NOT NULL,
    created TEXT NOT NULL
);
"""


class StoreError(Exception):
    """Base class of store failures."""


class StoreMissing(StoreError):
    """The store root has no database and the caller asked not to create one."""


class UnknownTask(StoreError, LookupError):
    """No task id starts with the given text."""


class AmbiguousTask(StoreError, LookupError):
    """Several task ids start with the given prefix."""


@dataclass
class Recovery:
    """What `recover()` cleaned up (folder and id names)."""

    temp_folders: list[str] = field(default_factory=list)
    orphan_folders: list[str] = field(default_factory=list)
    rows_without_folder: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.temp_folders or self.orphan_folders or self.rows_without_folder)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _safe_relpath(name: str) -> PurePosixPath:
    """A task-folder-relative path that cannot escape the folder."""
    rel = PurePosixPath(name)
    if not name or rel.is_absolute() or ".." in rel.parts or rel.parts[0] == ".":
        raise ValueError(f"task file name must be a relative path inside the folder: {name!r}")
    return rel


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: str | bytes) -> None:
    blob = data.encode() if isinstance(data, str) else data
    with open(path, "wb") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())
    if path.suffix == ".sh":
        path.chmod(0o755)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _counts() -> dict[str, Any]:
    return {"tried": 0, "validated": 0, "rejected": 0, "yield": 0.0, "by_rule": {}}


def _add_count(bucket: dict[str, Any], status: str, rule: str | None, n: int) -> None:
    bucket["tried"] += n
    bucket[status] += n
    if status == "rejected":
        key = rule or "unknown"
        bucket["by_rule"][key] = bucket["by_rule"].get(key, 0) + n
    bucket["yield"] = bucket["validated"] / bucket["tried"] if bucket["tried"] else 0.0


class Store:
    """One store root: a SQLite connection (shared by threads) and the task folders."""

    def __init__(self, root: Path | str = DEFAULT_ROOT, *, create: bool = True) -> None:
        self.root = Path(root).resolve()
        self.db_path = self.root / DB_NAME
        if not create and not self.db_path.is_file():
            raise StoreMissing(f"no store at {self.root}")
        for sub in ("tasks", "work", "cache"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            self.db_path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,  # explicit BEGIN/COMMIT below
            check_same_thread=False,
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        with self._write():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            self._add_columns()
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.last_recovery = self.recover()

    def _add_columns(self) -> None:
        """Columns added after a table was first made: a store written by an older miner gets them."""
        for table, column, kind in ADDED_COLUMNS:
            present = {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    # -- plumbing -------------------------------------------------------------------------

    @property
    def tasks_root(self) -> Path:
        return self.root / "tasks"

    @property
    def work_root(self) -> Path:
        return self.root / "work"

    @property
    def cache_root(self) -> Path:
        return self.root / "cache"

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from the start (BEGIN IMMEDIATE).

        The lock is also the cross-process mutex for the task folders: recover() and
        add_task() both run inside one, so neither sees the other's half-done work.
        """
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def integrity_check(self) -> str:
        """SQLite's own verdict on the database file ("ok" when sound)."""
        return str(self._query("PRAGMA integrity_check")[0][0])

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Remove what an interrupted writer left: temp folders, folders without a row, and
        rows whose folder is gone (so crawling again re-creates them)."""
        report = Recovery()
        with self._write() as conn:
            ids = {row[0] for row in conn.execute("SELECT id FROM tasks")}
            present: set[str] = set()
            for entry in sorted(self.tasks_root.iterdir()):
                if entry.name.startswith(TMP_PREFIX):
                    _remove(entry)
                    report.temp_folders.append(entry.name)
                elif entry.name not in ids:
                    _remove(entry)
                    report.orphan_folders.append(entry.name)
                else:
                    present.add(entry.name)
            for task_id in sorted(ids - present):
                conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
                report.rows_without_folder.append(task_id)
        return report

    # -- projects -------------------------------------------------------------------------

    def record_project(
        self,
        key: str,
        repo: str,
        commit: str,
        source_raw: str,
        origin: str,
        status: str,
        reason: str = "",
        healthy: HealthyState | None = None,
        seconds: float = 0.0,
        timings: dict[str, float] | None = None,
    ) -> None:
        """Insert or update a project row. 'running' stamps `started`; the others `finished`.
        `timings` (phase -> seconds) is kept when given, else left as it was. A row with a commit
        replaces the row of the same source that an unfetched skip left (its key is another)."""
        if status not in PROJECT_STATUSES:
            raise ValueError(f"project status must be one of {PROJECT_STATUSES}, not {status!r}")
        now = _now()
        healthy_json = healthy.model_dump_json() if healthy is not None else None
        timings_json = json.dumps(timings) if timings is not None else None
        finished = None if status == "running" else now
        with self._write() as conn:
            conn.execute(
                """INSERT INTO projects (key, repo, "commit", source_raw, origin, status, reason,
                                         healthy_json, started, finished, seconds, timings_json)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (key) DO UPDATE SET
                     repo = excluded.repo, "commit" = excluded."commit",
                     source_raw = excluded.source_raw, origin = excluded.origin,
                     status = excluded.status, reason = excluded.reason,
                     healthy_json = COALESCE(excluded.healthy_json, projects.healthy_json),
                     started = CASE WHEN excluded.status = 'running' THEN excluded.started
                                    ELSE COALESCE(projects.started, excluded.started) END,
                     finished = excluded.finished, seconds = excluded.seconds,
                     timings_json = COALESCE(excluded.timings_json, projects.timings_json)""",
                (key, repo, commit, source_raw, origin, status, reason, healthy_json, now,
                 finished, seconds, timings_json),
            )
            if commit:  # the source fetched: a skip recorded when an earlier crawl could not fetch it is over
                conn.execute("""DELETE FROM projects WHERE source_raw = ? AND "commit" = '' AND key != ?""",
                             (source_raw, key))

    def project_status(self, key: str) -> str | None:
        """'mined', 'skipped', 'running', or None for a project never seen."""
        rows = self._query("SELECT status FROM projects WHERE key = ?", (key,))
        return rows[0]["status"] if rows else None

    def projects(self) -> list[dict[str, Any]]:
        """Every project row (without the healthy state; see `healthy()`), oldest first."""
        rows = self._query(
            """SELECT key, repo, "commit", source_raw, origin, status, reason, started, finished,
                      seconds, healthy_json IS NOT NULL AS has_healthy
               FROM projects ORDER BY started, key"""
        )
        return [{**dict(row), "has_healthy": bool(row["has_healthy"])} for row in rows]

    def task_project_keys(self) -> set[str]:
        """The keys of the projects that stored tasks were mined from (what `miner gc` keeps)."""
        return {row[0] for row in self._query("SELECT DISTINCT project_key FROM tasks")}

    def healthy(self, key: str) -> HealthyState | None:
        """The healthy state recorded for a project, if any."""
        rows = self._query("SELECT healthy_json FROM projects WHERE key = ?", (key,))
        if not rows or rows[0][0] is None:
            return None
        return HealthyState.model_validate_json(rows[0][0])

    def recorded_state(self, key: str) -> HealthyState | None:
        """A healthy state recorded under a preparation key (see miner.prepare.state_key)."""
        rows = self._query("SELECT state_json FROM healthy_states WHERE key = ?", (key,))
        return HealthyState.model_validate_json(rows[0][0]) if rows else None

    def recorded_states(self, repo: str) -> dict[str, HealthyState]:
        """Every healthy state recorded for a repository, by preparation key."""
        rows = self._query("SELECT key, state_json FROM healthy_states WHERE repo = ?", (repo,))
        return {row["key"]: HealthyState.model_validate_json(row["state_json"]) for row in rows}

    def record_state(self, key: str, state: HealthyState) -> None:
        """Keep a measured healthy state for later preparations with the same key."""
        with self._write() as conn:
            conn.execute(
                """INSERT OR REPLACE INTO healthy_states (key, repo, "commit", backend, state_json, created)
                   VALUES (?, ?, ?, ?, ?, ?)""",
                (key, state.repo, state.commit, state.backend, state.model_dump_json(), _now()))

    # -- candidates -----------------------------------------------------------------------

    def has_candidate(self, candidate_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM candidates WHERE id = ?", (candidate_id,)))

    def candidate_rule(self, candidate_id: str) -> str | None:
        """The rule that rejected a stored candidate ("" when it was validated); None if not stored."""
        rows = self._query("SELECT rule FROM candidates WHERE id = ?", (candidate_id,))
        return (rows[0]["rule"] or "") if rows else None

    def candidate_verdict(self, candidate_id: str) -> dict[str, Any] | None:
        """status, rule, detail and f2p of a stored candidate; None if not stored."""
        rows = self._query("SELECT status, rule, detail, f2p_json FROM candidates WHERE id = ?", (candidate_id,))
        if not rows:
            return None
        row = rows[0]
        return {"status": row["status"], "rule": row["rule"], "detail": row["detail"],
                "f2p": json.loads(row["f2p_json"] or "[]")}

    def tried_of_type(self, repo: str, commit: str, type_id: str) -> int:
        """How many candidates of one type are stored for a repository at a commit."""
        rows = self._query('SELECT COUNT(*) AS n FROM candidates WHERE repo = ? AND "commit" = ? AND type_id = ?',
                           (repo, commit, type_id))
        return int(rows[0]["n"])

    def verdicts(self, repo: str) -> dict[str, dict[str, Any]]:
        """Every stored candidate of a repository: id -> status, rule, detail and f2p."""
        rows = self._query("SELECT id, status, rule, detail, f2p_json FROM candidates WHERE repo = ?", (repo,))
        return {row["id"]: {"status": row["status"], "rule": row["rule"], "detail": row["detail"],
                            "f2p": json.loads(row["f2p_json"] or "[]")} for row in rows}

    def target_rules(self, repo: str, commit: str) -> list[tuple[str, str, str | None]]:
        """(target key, status, rule) of every stored candidate of a repository at a commit."""
        rows = self._query('SELECT target, status, rule FROM candidates WHERE repo = ? AND "commit" = ?',
                           (repo, commit))
        return [(row["target"], row["status"], row["rule"]) for row in rows]

    def record_candidate(self, project_key: str, cand: Candidate) -> None:
        """Record a validated or rejected candidate; recording the same id again updates it."""
        inv = cand.inversion
        predicted = json.dumps(inv.predicted_f2p) if inv.predicted_f2p is not None else None
        with self._write() as conn:
            conn.execute(
                """INSERT INTO candidates (id, project_key, repo, "commit", type_id, family, target,
                                           status, rule, detail, suite_runs, seconds,
                                           predicted_f2p_json, f2p_json, graph_depth, created, timings_json)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (id) DO UPDATE SET
                     project_key = excluded.project_key, status = excluded.status,
                     rule = excluded.rule, detail = excluded.detail,
                     suite_runs = excluded.suite_runs, seconds = excluded.seconds,
                     predicted_f2p_json = excluded.predicted_f2p_json,
                     f2p_json = excluded.f2p_json, graph_depth = excluded.graph_depth,
                     timings_json = excluded.timings_json""",
                (cand.id, project_key, cand.repo, cand.commit, inv.type_id, inv.family,
                 inv.target.key, cand.status, cand.rule, cand.detail, cand.suite_runs,
                 cand.seconds, predicted, json.dumps(cand.f2p), inv.graph_depth, _now(),
                 json.dumps(cand.timings)),
            )

    # -- tasks ----------------------------------------------------------------------------

    def add_task(
        self, task: Task, files: dict[str, str | bytes], project_key: str | None = None
    ) -> Path:
        """Write a task folder atomically and index it; a no-op for an id already stored.

        `files` maps folder-relative paths (e.g. "break.sh", "logs/break.log") to contents;
        task.json is always written from the model (filling `created` when empty), so a
        "task.json" entry in `files` is ignored. `project_key` defaults to what
        Project.key gives for the task's repo, commit and source overrides.
        """
        if project_key is None:
            project_key = content_id(task.repo, task.commit, task.source.overrides)
        rels = {name: _safe_relpath(name) for name in files if name != "task.json"}
        if not task.created:
            task = task.model_copy(update={"created": _now()})
        final = self.tasks_root / task.id
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM tasks WHERE id = ?", (task.id,)).fetchone():
                return final
            if final.exists():  # left by a crash after the rename: no row, so not a task
                shutil.rmtree(final)
            tmp = self.tasks_root / f"{TMP_PREFIX}{task.id}-{uuid.uuid4().hex[:8]}"
            try:
                self._write_folder(tmp, task, {rels[n]: files[n] for n in rels})
                tmp.rename(final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _fsync_path(self.tasks_root)
            conn.execute(
                """INSERT INTO tasks (id, project_key, repo, "commit", type_id, family, target,
                                      difficulty, created, task_json)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (task.id, project_key, task.repo, task.commit, task.type_id, task.family,
                 task.target.key, task.difficulty, task.created, task.model_dump_json()),
            )
        return final

    @staticmethod
    def _write_folder(folder: Path, task: Task, files: dict[PurePosixPath, str | bytes]) -> None:
        folder.mkdir()
        _write_synced(folder / "task.json", task.model_dump_json(indent=2))
        subdirs = {folder}
        for rel, data in files.items():
            path = folder.joinpath(*rel.parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            subdirs.add(path.parent)
            _write_synced(path, data)
        for sub in sorted(subdirs, key=lambda p: len(p.parts), reverse=True):
            _fsync_path(sub)

    def _resolve_id(self, id_or_prefix: str) -> str:
        if not id_or_prefix:
            raise UnknownTask("empty task id")
        if self._query("SELECT 1 FROM tasks WHERE id = ?", (id_or_prefix,)):
            return id_or_prefix
        escaped = id_or_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._query(
            "SELECT id FROM tasks WHERE id LIKE ? ESCAPE '\\' ORDER BY id LIMIT 6",
            (escaped + "%",),
        )
        if not rows:
            raise UnknownTask(f"no task with id {id_or_prefix!r} in {self.root}")
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            raise AmbiguousTask(f"task id prefix {id_or_prefix!r} is ambiguous: {shown}")
        return str(rows[0][0])

    def set_blind_repair(self, task_id: str, label: str) -> Task:
        """Record a task's blind-repair label (miner.ladder) in its row and its task.json."""
        task = self.get_task(task_id).model_copy(update={"blind_repair": label})
        with self._write() as conn:
            conn.execute("UPDATE tasks SET task_json = ? WHERE id = ?", (task.model_dump_json(), task.id))
            _write_synced(self.tasks_root / task.id / "task.json", task.model_dump_json(indent=2))
        return task

    def get_task(self, id_or_prefix: str) -> Task:
        """The task with this id, or with the only id starting with this prefix."""
        task_id = self._resolve_id(id_or_prefix)
        row = self._query("SELECT task_json FROM tasks WHERE id = ?", (task_id,))[0]
        return Task.model_validate_json(row[0])

    def task_dir(self, id_or_prefix: str) -> Path:
        """The folder of a stored task (id or unique prefix)."""
        return self.tasks_root / self._resolve_id(id_or_prefix)

    def list_tasks(
        self,
        type_spec: str | None = None,
        repo: str | None = None,
        difficulty: str | None = None,
    ) -> list[Task]:
        """Stored tasks, oldest first.

        type_spec: an exact type id ("deps/uninstall") or a family ("deps").
        repo: an exact repo; when no task has exactly that repo, a substring of it.
        """
        where, params = [], []
        if type_spec:
            where.append("(type_id = ? OR family = ?)")
            params += [type_spec, type_spec]
        if difficulty:
            where.append("difficulty = ?")
            params.append(difficulty)
        if repo:
            exact = self._query("SELECT 1 FROM tasks WHERE repo = ? LIMIT 1", (repo,))
            where.append("repo = ?" if exact else "instr(repo, ?) > 0")
            params.append(repo)
        sql = "SELECT task_json FROM tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._query(sql + " ORDER BY created, id", tuple(params))
        return [Task.model_validate_json(row[0]) for row in rows]

    # -- model calls ----------------------------------------------------------------------

    def record_llm_calls(self, project_key: str, repo: str, calls: list[dict[str, Any]]) -> None:
        """Append model calls: dicts with purpose, goal, round, candidate_id, model, prompt_tokens,
        completion_tokens, latency, attempts, outcome, cached (a cache hit has 0 tokens)."""
        columns = ("purpose", "goal", "round", "candidate_id", "model", "prompt_tokens", "completion_tokens",
                   "latency", "attempts", "outcome", "cached")
        defaults = {"purpose": "agent", "goal": "", "round": 0, "candidate_id": None, "prompt_tokens": 0,
                    "completion_tokens": 0, "latency": 0.0, "attempts": 0, "cached": False}
        rows = [(project_key, repo, *[{**defaults, **c}[k] for k in columns], _now()) for c in calls]
        with self._write() as conn:
            conn.executemany(
                f"""INSERT INTO llm_calls (project_key, repo, {", ".join(columns)}, created)
                    VALUES ({", ".join("?" * (len(columns) + 3))})""", rows)

    def llm_stats(self) -> dict[str, Any]:
        """Tokens spent (cache hits cost 0): in total, per project, per model, per validated agent
        task; and the agent's yield by round (a candidate counts once, at its first round)."""
        total = self._query(
            """SELECT COUNT(*) AS calls, COALESCE(SUM(prompt_tokens), 0) AS prompt,
                      COALESCE(SUM(completion_tokens), 0) AS completion, COALESCE(SUM(cached), 0) AS cached,
                      COALESCE(SUM(latency), 0) AS latency FROM llm_calls""")[0]
        validated = self._query(
            """SELECT DISTINCT l.candidate_id, c.repo FROM llm_calls l JOIN candidates c ON c.id = l.candidate_id
               WHERE c.status = 'validated' AND l.purpose = 'agent'""")
        agent_tokens = self._query(
            """SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM llm_calls
               WHERE purpose = 'agent'""")[0][0]
        by_project: dict[str, dict[str, Any]] = {}
        for row in self._query(
                """SELECT repo, COUNT(*) AS calls, SUM(prompt_tokens + completion_tokens) AS tokens,
                          SUM(cached) AS cached FROM llm_calls GROUP BY repo ORDER BY repo"""):
            tasks = sum(1 for v in validated if v["repo"] == row["repo"])
            by_project[row["repo"]] = {"calls": row["calls"], "tokens": row["tokens"], "cached_calls": row["cached"],
                                       "validated": tasks,
                                       "tokens_per_validated": row["tokens"] / tasks if tasks else None}
        by_model = {row["model"]: {"calls": row["calls"], "tokens": row["tokens"]} for row in self._query(
            """SELECT model, COUNT(*) AS calls, SUM(prompt_tokens + completion_tokens) AS tokens
               FROM llm_calls GROUP BY model ORDER BY model""")}
        by_outcome = {row["outcome"]: row["n"] for row in self._query(
            "SELECT outcome, COUNT(*) AS n FROM llm_calls GROUP BY outcome ORDER BY outcome")}
        by_round: dict[str, dict[str, Any]] = {}
        for row in self._query(
                """SELECT first.round AS round, c.status AS status, COUNT(*) AS n
                   FROM (SELECT candidate_id, MIN(round) AS round FROM llm_calls
                         WHERE candidate_id IS NOT NULL AND purpose = 'agent' GROUP BY candidate_id) first
                   JOIN candidates c ON c.id = first.candidate_id GROUP BY first.round, c.status"""):
            bucket = by_round.setdefault(str(row["round"]), _counts())
            _add_count(bucket, row["status"], None, row["n"])
        for bucket in by_round.values():
            bucket.pop("by_rule")
        return {
            "calls": total["calls"], "cached_calls": total["cached"], "prompt_tokens": total["prompt"],
            "completion_tokens": total["completion"], "tokens": total["prompt"] + total["completion"],
            "seconds": round(total["latency"], 3), "agent_validated": len(validated),
            "tokens_per_validated": agent_tokens / len(validated) if validated else None,
            "by_project": by_project, "by_model": by_model, "by_outcome": by_outcome, "by_round": by_round,
        }

    # -- statistics -----------------------------------------------------------------------

    def symptoms(self, repo: str, commit: str) -> dict[tuple[str, frozenset[str]], int]:
        """How many stored tasks of one project share each (family, F2P set): the duplicate-symptom rule."""
        found: dict[tuple[str, frozenset[str]], int] = {}
        for row in self._query('SELECT family, task_json FROM tasks WHERE repo = ? AND "commit" = ?', (repo, commit)):
            key = (row["family"], frozenset(json.loads(row["task_json"])["f2p"]))
            found[key] = found.get(key, 0) + 1
        return found

    def task_symptoms(self, repo: str) -> list[tuple[str, str, list[str]]]:
        """(commit, family, F2P) of every stored task of a repository (duplicate-symptom, all commits)."""
        rows = self._query('SELECT "commit", family, task_json FROM tasks WHERE repo = ? ORDER BY created, id',
                           (repo,))
        return [(row["commit"], row["family"], json.loads(row["task_json"])["f2p"]) for row in rows]

    def _f2p_sets(self) -> dict[str, dict[frozenset[str], int]]:
        """Per repo, its tasks' F2P sets with how many tasks have each."""
        found: dict[str, dict[frozenset[str], int]] = {}
        for row in self._query("SELECT repo, task_json FROM tasks"):
            sets = found.setdefault(row["repo"], {})
            key = frozenset(json.loads(row["task_json"])["f2p"])
            sets[key] = sets.get(key, 0) + 1
        return found

    def _project_times(self) -> dict[str, dict[str, Any]]:
        """Per repo: `seconds` (wall of its latest crawl), `suite_seconds` (one healthy suite run),
        `suite_runs` (its candidates' suite runs, partial runs as fractions), `candidate_seconds`,
        and the phase tables: `timings` (its candidates' phases summed) and `project_timings`
        (fetch, build, healthy state, graph, choice of candidates, healthy manifest)."""
        found: dict[str, dict[str, Any]] = {}
        for row in self._query("""SELECT repo, seconds, healthy_json, timings_json FROM projects
                                  ORDER BY started, key"""):
            healthy = json.loads(row["healthy_json"]) if row["healthy_json"] else {}
            found[row["repo"]] = {"seconds": round(row["seconds"], 3),
                                  "suite_seconds": healthy.get("suite_seconds", 0.0),
                                  "project_timings": json.loads(row["timings_json"] or "{}"),
                                  "suite_runs": 0.0, "candidate_seconds": 0.0, "timings": {}}
        for row in self._query("SELECT repo, suite_runs, seconds, timings_json FROM candidates"):
            times = found.setdefault(row["repo"], {"seconds": 0.0, "suite_seconds": 0.0, "project_timings": {},
                                                   "suite_runs": 0.0, "candidate_seconds": 0.0, "timings": {}})
            times["suite_runs"] = round(times["suite_runs"] + row["suite_runs"], 3)
            times["candidate_seconds"] = round(times["candidate_seconds"] + row["seconds"], 3)
            for phase, value in json.loads(row["timings_json"] or "{}").items():
                times["timings"][phase] = round(times["timings"].get(phase, 0.0) + value, 3)
        return found

    def stats(self) -> dict[str, Any]:
        """Candidate counts and yield (validated / tried): overall, per type, per project.

        by_project is keyed by repo and also lists projects without candidates (skipped
        ones), with the status and reason of the project's latest row, and its times (see
        `_project_times`: wall seconds, one healthy suite run, suite runs, phase tables).
        """
        total = _counts()
        by_type: dict[str, dict[str, Any]] = {}
        by_project: dict[str, dict[str, Any]] = {}
        for proj in self.projects():  # oldest first, so the latest row's status wins
            bucket = by_project.setdefault(proj["repo"], _counts())
            bucket["status"], bucket["reason"] = proj["status"], proj["reason"]
        rows = self._query(
            """SELECT repo, type_id, status, rule, COUNT(*) AS n FROM candidates
               GROUP BY repo, type_id, status, rule ORDER BY repo, type_id"""
        )
        for row in rows:
            status, rule, n = row["status"], row["rule"], row["n"]
            _add_count(total, status, rule, n)
            _add_count(by_type.setdefault(row["type_id"], _counts()), status, rule, n)
            project = by_project.setdefault(row["repo"], {**_counts(), "status": "", "reason": ""})
            _add_count(project, status, rule, n)
        for repo, sets in self._f2p_sets().items():
            bucket = by_project.setdefault(repo, {**_counts(), "status": "", "reason": ""})
            bucket["tasks"], bucket["distinct_f2p"] = sum(sets.values()), len(sets)
        for repo, times in self._project_times().items():
            by_project.setdefault(repo, {**_counts(), "status": "", "reason": ""}).update(times)
        counts = self._query("SELECT (SELECT COUNT(*) FROM tasks), (SELECT COUNT(*) FROM projects)")
        return {
            **total,
            "tasks": counts[0][0],
            "projects": counts[0][1],
            "by_type": by_type,
            "by_project": by_project,
        }
