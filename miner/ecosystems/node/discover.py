"""Node's part of `miner discover`: the npm names file's check (`miner discover --npm`).

An npm package is pinned to the newest version matching its range (or `latest`), its registry
tarball fetched (npm pack) and kept when it ships a test suite a Node runner miner reads runs
(miner.ecosystems.node.runner) and has runtime dependencies to break.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from miner.archives import FetchError
from miner.ecosystems.base import Criteria, NameEntry, RegistryDiscovery, Unchecked
from miner.ecosystems.node.npm import dependencies, host_command
from miner.ecosystems.node.registry import NPM_NAME
from miner.ecosystems.node.registry import fetch as fetch_tarball
from miner.ecosystems.node.runner import project_command
from miner.models import Source


def npm_version(name: str, spec: str = "") -> str | None:
    """The newest version of an npm package matching `spec` (npm view: the registry npm is set to);
    None when no version matches; Unchecked when the registry cannot be asked."""
    try:
        argv = host_command("view", f"{name}@{spec or 'latest'}", "version", "--json", "--loglevel=error")
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise Unchecked(f"npm view {name}: {exc}") from None
    if run.returncode != 0:
        if "E404" in run.stderr or "ETARGET" in run.stderr or "notarget" in run.stderr:
            return None
        raise Unchecked(f"npm view {name}: {' '.join(run.stderr.split())[:200]}")
    try:
        found = json.loads(run.stdout or "null")
    except ValueError:
        return None
    versions = found if isinstance(found, list) else [found]
    return str(versions[-1]) if versions and versions[-1] else None


def name_entry(text: str) -> NameEntry:
    """A names file's line: NAME or NAME@RANGE (`npm:` optional)."""
    name, _, spec = text.removeprefix("npm:").rpartition("@") if text.rfind("@") > 0 else (text, "", "")
    if not NPM_NAME.match(name or text):
        return NameEntry(text, problem="not an npm package name")
    return NameEntry(text, name or text, spec)


def check_npm(entry: NameEntry, cache: Path, criteria: Criteria, index: str | None = None) -> tuple[bool, str, str]:
    """Pin one npm name to a version, fetch its tarball and keep it when it ships a suite miner runs
    and has runtime dependencies (what npm's break types act on). `index` is pip's: npm asks the
    registry it is set to."""
    if entry.problem:
        return False, entry.problem, ""
    version = npm_version(entry.name, entry.spec)
    if version is None:
        return False, f"no version of {entry.name} matches {entry.spec or 'latest'} on the registry", ""
    pin = f"{entry.name}@{version}"
    cache = Path(cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    try:
        project = fetch_tarball(Source(raw=f"npm:{pin}", kind="npm", location=pin), cache)
    except FetchError as exc:
        return False, exc.reason, ""
    deps = dependencies(project.path)
    if not deps:
        return False, f"{pin}: no runtime dependencies (nothing in node_modules its code loads)", ""
    return True, f"{pin}: runs {project_command(project.path)} ({len(deps)} runtime dependencies)", f"npm:{pin}"


DISCOVERY = RegistryDiscovery(prefix="npm", entry=name_entry, key=lambda e: f"npm:{e.name or e.text}@{e.spec}",
                              check=check_npm, criteria=lambda: "npm")
