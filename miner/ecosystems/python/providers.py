"""Python's context providers: the break types' facts that come from the package index (an older
release of a distribution, the one before it, one outside what another installed distribution
requires), for miner.inverters.procedural.

Each provider takes the inverter (its cached `releases`) and the Job, and returns the type's
template variables, or None when the pair does not apply.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from miner.ecosystems.base import Job, Releases
from miner.ecosystems.releases import older_release
from miner.models import HealthyState, Target

REGISTRY = "pypi"


@functools.lru_cache(maxsize=1024)
def pip_index_versions(name: str, timeout: float = 30.0) -> list[str]:
    """Release versions of a distribution on the configured index, newest first ([] when unknown);
    asked once per process (a crawl asks for the same distributions in every project and batch)."""
    try:
        result = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                                capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    for line in result.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def _final_versions(available: Iterable[str]) -> list[Version]:
    found = []
    for text in available:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            found.append(version)
    return sorted(found, reverse=True)


def previous_release(current: str, available: Iterable[str]) -> str | None:
    """The newest final release older than `current`, or None."""
    try:
        now = Version(current)
    except InvalidVersion:
        return None
    return next((str(v) for v in _final_versions(available) if v < now), None)


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_on(requirement: str, dist: str) -> SpecifierSet | None:
    """The version specifier of a "name specifier" requirement string on `dist` (None: not on it,
    or no specifier)."""
    name, _, spec = requirement.partition(" ")
    if canonical_name(name) != canonical_name(dist) or not spec.strip():
        return None
    try:
        return SpecifierSet(spec.replace(" ", ""))
    except InvalidSpecifier:
        return None


def violating_release(current: str, spec: SpecifierSet, available: Iterable[str]) -> str | None:
    """A final release outside `spec`: the oldest newer one than `current` (an upgrade too far), else
    the newest older one (a downgrade too far); None when every release satisfies it."""
    try:
        now = Version(current)
    except InvalidVersion:
        return None
    outside = [v for v in _final_versions(available) if not spec.contains(v, prereleases=False)]
    newer = sorted(v for v in outside if v > now)
    older = [v for v in outside if v < now]
    chosen = newer[0] if newer else older[0] if older else None
    return str(chosen) if chosen else None


def _releases(inverter: Releases, job: Job) -> list[str]:
    """Releases on the index of the target's distribution (the target itself, or its `dist`)."""
    name = job.target.name if job.target.kind == "distribution" else job.target.attrs.get("dist") or ""
    return inverter.releases(REGISTRY, name) if name else []


def bad_version(inverter: Releases, job: Job) -> dict[str, Any] | None:
    bad = older_release(job.base.get("version") or "", _releases(inverter, job))
    return {"bad_version": bad} if bad else None


def previous_version(inverter: Releases, job: Job) -> dict[str, Any] | None:
    before = previous_release(job.base.get("version") or "", _releases(inverter, job))
    return {"old_version": before} if before else None


def conflicting_version(inverter: Releases, job: Job) -> dict[str, Any] | None:
    """A release of the distribution outside what another installed distribution requires of it."""
    name = job.target.name
    wanted = [(canonical_name(d.name), spec) for d in job.healthy.inventory for req in d.requirements
              if (spec := requirement_on(req, name)) is not None]
    for requirer, spec in sorted(wanted, key=lambda pair: (pair[0], str(pair[1]))):
        found = violating_release(job.base["version"], spec, _releases(inverter, job))
        if found:
            return {"conflict_version": found, "required_by": requirer, "specifier": str(spec)}
    return None


KINDS = frozenset({"distribution", "module", "script", "submodule", "bytecode"})


def target_context(healthy: HealthyState, target: Target) -> dict[str, Any] | None:
    """The context every type of a Python target kind may use: the distribution and its version
    (None when the distribution is gone)."""
    if target.kind == "distribution":
        version = healthy.distributions.get(target.name) or target.attrs.get("version")
        return {"dist": target.name, "version": version} if version else None
    dist = target.attrs.get("dist")
    version = healthy.distributions.get(dist or "") or target.attrs.get("version")
    return {"dist": dist, "version": version}


PROVIDERS = {"bad_version": bad_version, "previous_version": previous_version,
             "conflicting_version": conflicting_version}
