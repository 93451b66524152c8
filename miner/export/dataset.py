"""A Harbor dataset: the task folders of an export listed by content digest, and its card.

    <out>/dataset.toml    [dataset] ORG/NAME, version, description, authors, keywords; one [[tasks]]
                          entry (name, digest) per task folder; [metadata] the miner that made it
    <out>/README.md       the dataset card: counts by category, family, evidence, difficulty (guessed
                          and measured), project; the checks the tasks passed; one row per task
    <out>/checks.json     the last re-check (`miner revalidate`), when one ran: per task, its verdict

A task's digest is Harbor's own (harbor.publisher.packager.Packager.compute_content_hash): sha256
over "path\\0sha256(file)\\n" for the task's publishable files in path order, so `harbor sync`
finds every digest unchanged and `harbor publish` uploads what the digest names. The card and the
manifest are rebuilt from the folders on disk (task.toml's [metadata]), so a dataset that grew over
several exports lists all its tasks.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import subprocess
import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from miner import __version__

MANIFEST = "dataset.toml"
CARD = "README.md"
CHECKS = "checks.json"
# What Harbor's packager collects of a task folder, and what it leaves out unless the folder has a .gitignore.
SINGLE_FILES = ("task.toml", "instruction.md", "README.md", "trajectory.json")
FOLDERS = ("environment", "tests", "solution", "steps")
DEFAULT_IGNORES = ("__pycache__", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
KEEP_ALL = "# every file of this folder belongs to the task (Harbor's publisher honours this file)\n"


def author_table(author: str) -> dict[str, str]:
    """An [[task.authors]] entry from 'Name <email>' or 'Name' (Harbor's own `init --author` form)."""
    name, _, email = author.partition("<")
    return {"name": name.strip()} | ({"email": email.rstrip(">").strip()} if email else {})


def ignored_by_default(rel: str) -> bool:
    """Would Harbor's publisher leave this folder-relative path out (its default ignores)?"""
    parts = rel.split("/")
    return any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in DEFAULT_IGNORES)


def publishable(folder: Path) -> list[str]:
    """The task's files Harbor publishes, folder-relative, in its order. miner's folders either have
    no file the default ignores name or carry a .gitignore ignoring nothing (KEEP_ALL)."""
    found = [name for name in SINGLE_FILES if (folder / name).is_file()]
    for top in FOLDERS:
        if (folder / top).is_dir():
            found += [p.relative_to(folder).as_posix() for p in (folder / top).rglob("*")
                      if p.is_file() and p.name != ".harborignore"]
    if not (folder / ".gitignore").is_file():
        found = [rel for rel in found if not ignored_by_default(rel)]
    return sorted(found)


def content_digest(files: dict[str, bytes]) -> str:
    """Harbor's digest (hex) of files by folder-relative path: sha256 over "path\\0sha256(file)\\n" in path order."""
    outer = hashlib.sha256()
    for rel in sorted(files):
        outer.update(f"{rel}\0{hashlib.sha256(files[rel]).hexdigest()}\n".encode())
    return outer.hexdigest()


def task_digest(folder: Path) -> str:
    """Harbor's content digest of a task folder ("sha256:<hex>")."""
    return f"sha256:{content_digest({rel: (folder / rel).read_bytes() for rel in publishable(folder)})}"


@dataclass(frozen=True)
class DatasetTask:
    """One task folder of the dataset: its Harbor name, folder and task.toml."""

    name: str
    folder: Path
    config: dict

    @property
    def metadata(self) -> dict:
        return self.config.get("metadata", {})


def dataset_tasks(out: Path) -> list[DatasetTask]:
    """The task folders directly in `out` (those holding a task.toml), by name."""
    found = []
    for child in sorted(p for p in out.iterdir() if p.is_dir() and (p / "task.toml").is_file()):
        config = tomllib.loads((child / "task.toml").read_text())
        found.append(DatasetTask(config.get("task", {}).get("name", child.name), child, config))
    return sorted(found, key=lambda t: t.name)


def miner_commit() -> str | None:
    """The git commit of the miner that runs, when it runs from a checkout (None when installed)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def manifest(name: str, version: str, authors: list[dict], tasks: list[DatasetTask]) -> dict:
    """dataset.toml as Harbor's DatasetManifest reads it (schema 1.0)."""
    families = sorted({t.metadata.get("inversion_family", "") for t in tasks} - {""})
    commit = miner_commit()
    return {
        "schema_version": "1.0",
        "dataset": {
            "name": name,
            "version": version,
            "description": f"{len(tasks)} environment-repair tasks mined by miner from "
                           f"{len(projects(tasks))} working projects: each environment was broken on "
                           "purpose and the task is to repair it.",
            "authors": authors,
            "keywords": ["environment-repair", *families],
        },
        "tasks": [{"name": t.name, "digest": task_digest(t.folder)} for t in tasks],
        "metadata": {"miner_version": __version__, **({"miner_commit": commit} if commit else {}),
                     "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


def projects(tasks: Iterable[DatasetTask]) -> set[str]:
    return {t.metadata.get("source") or t.metadata.get("repository", "?") for t in tasks}


def read_manifest(out: Path) -> dict:
    return tomllib.loads((out / MANIFEST).read_text())


def read_checks(out: Path) -> dict:
    """The last re-check's verdicts by task name ({} when none ran)."""
    path = out / CHECKS
    return json.loads(path.read_text()) if path.is_file() else {}


def write_dataset(out: Path, name: str, version: str, authors: list[dict]) -> list[DatasetTask]:
    """(Re)write dataset.toml and the card of the task folders in `out`; the tasks listed."""
    tasks = dataset_tasks(out)
    save(out, manifest(name, version, authors, tasks), tasks)
    return tasks


def save(out: Path, data: dict, tasks: list[DatasetTask]) -> None:
    """Write a manifest (see manifest()) of the tasks as dataset.toml, and the card."""
    (out / MANIFEST).write_text(f"# Harbor dataset written by miner {__version__}; `harbor sync` leaves it as it is\n"
                                + tomli_w.dumps(data))
    (out / CARD).write_text(card(data, tasks, read_checks(out)))


def write_card(out: Path) -> None:
    """(Re)write README.md from dataset.toml, the task folders and the last re-check."""
    (out / CARD).write_text(card(read_manifest(out), dataset_tasks(out), read_checks(out)))


# -- the card ------------------------------------------------------------------------------------

COUNTED = (
    ("category", lambda m: [m.get("inversion_category") or "-"]),
    ("family", lambda m: [m.get("inversion_family") or "-"]),
    ("evidence", lambda m: m.get("evidence_kinds") or ["none recorded"]),
    ("difficulty (guessed at mining)", lambda m: [m.get("difficulty") or "-"]),
    ("difficulty (measured: the first blind repair that works)", lambda m: [m.get("blind_repair") or "not measured"]),
    ("project", lambda m: [m.get("source") or m.get("repository") or "-"]),
)


def table(header: tuple[str, ...], rows: Iterable[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def counts_section(tasks: list[DatasetTask]) -> str:
    parts = []
    for title, values in COUNTED:
        counted = Counter(v for t in tasks for v in values(t.metadata))
        parts.append(f"### By {title}\n\n" + table((title.split(" (")[0], "tasks"), counted.most_common()))
    return "\n\n".join(parts)


def checks_section(checks: dict, tasks: list[DatasetTask]) -> str:
    mined = ("Every task passed miner's validation when it was mined: the healthy project passes its "
             "checks, the break fails some of them, the reference fix restores all, the break is in the "
             "environment only, visible from the solver's shell, and its repair recoverable from "
             "evidence the environment or its public sources hold. Every exported task's suite was "
             "judged in its healthy image.")
    if not checks:
        return mined + ("\n\nNot re-checked since the export: `miner revalidate DIR` rebuilds each task and "
                        "reruns the oracle and an untouched run (and the solver's view).")
    decayed = {name: c for name, c in checks.items() if not c.get("ok")}
    when = max((c.get("checked", "") for c in checks.values()), default="")
    lines = [mined, "", f"Re-checked {when} (`miner revalidate`): {len(checks) - len(decayed)} of "
             f"{len(checks)} tasks build, score 1 after the reference fix and 0 untouched, and show their "
             "symptom in the solver's shell."]
    if decayed:
        lines += ["", "Decayed (not fit for training until re-exported):", "",
                  table(("task", "why"), sorted((n, c.get("reason", "")) for n, c in decayed.items()))]
    unchecked = [t.name for t in tasks if t.name not in checks]
    if unchecked:
        lines += ["", f"Not in the re-check: {len(unchecked)} task(s) added after it."]
    return "\n".join(lines)


def card(data: dict, tasks: list[DatasetTask], checks: dict) -> str:
    """The dataset card (Markdown)."""
    info, meta = data["dataset"], data.get("metadata", {})
    made_by = f"miner {meta.get('miner_version', '?')}" + (f" (commit {meta['miner_commit'][:12]})"
                                                          if meta.get("miner_commit") else "")
    status = {name: ("ok" if c.get("ok") else "decayed") for name, c in checks.items()}
    schemas = ", ".join(sorted({str(t.config.get("schema_version", "?")) for t in tasks})) or "-"
    rows = [(t.name, t.metadata.get("inversion_type", "-"), t.metadata.get("source", "-"),
             t.metadata.get("difficulty", "-"), t.metadata.get("blind_repair", "-"), status.get(t.name, "-"))
            for t in tasks]
    return "\n\n".join([
        f"# {info['name']}",
        f"{info.get('description', '')}\n\nVersion {info.get('version', '?')}, made by {made_by} on "
        f"{meta.get('created', '?')}; {len(tasks)} tasks from {len(projects(tasks))} projects, in Harbor's "
        f"task format (schema {schemas}): `harbor run -p FOLDER` runs them, `harbor publish FOLDER` publishes them.",
        "## Checks\n\n" + checks_section(checks, tasks),
        "## Counts\n\n" + counts_section(tasks),
        "## Tasks\n\n" + table(("task", "inversion", "project", "difficulty", "blind repair", "re-check"), rows),
    ]) + "\n"
