"""Node's context providers for miner.inverters.procedural: the file `require` loads of an
installed package, an older release of it on npm's registry, a release its declared range accepts
but the lockfile does not pin (drift), a release outside the range another package's
peerDependencies ask of it (a peer conflict), and the program of it the tests run (its `.bin` link).

Each provider takes the inverter (its cached `releases`) and the Job, and returns the type's
template variables, or None when the pair does not apply.
"""

from __future__ import annotations

from typing import Any

from miner.ecosystems.base import Job, ManifestError, Releases
from miner.ecosystems.node import semver
from miner.ecosystems.node.npm import _resolve_from
from miner.ecosystems.node.runner import read_manifest
from miner.ecosystems.releases import older_release
from miner.models import HealthyState, NodePackage, Target

REGISTRY = "npm"


def node_entry(inverter: Releases, job: Job) -> dict[str, Any] | None:
    """The file `require` loads of an installed package, when it lies in the package's folder."""
    entry = job.target.attrs.get("entry") or ""
    inside = entry.startswith(f"{job.target.path}/") and "/node_modules/" not in entry[len(job.target.path):]
    return {"entry": entry} if inside else None


def node_bad_version(inverter: Releases, job: Job) -> dict[str, Any] | None:
    """An older release of an installed npm package on its registry (another major when there is one)."""
    bad = older_release(job.base.get("version") or "", inverter.releases(REGISTRY, job.target.name))
    return {"bad_version": bad} if bad else None


DEPENDENCY_FIELDS = ("dependencies", "optionalDependencies", "devDependencies")


def _requirers(job: Job) -> list[NodePackage]:
    """The installed packages whose dependencies node resolves to the target's install folder."""
    packages = job.healthy.node_packages
    by_path = {p.path: p for p in packages}
    return [p for p in packages if job.target.name in p.ranges
            and _resolve_from(p.path, job.target.name, by_path) == job.target.path]


def _project_range(job: Job) -> str | None:
    """The range package.json declares on the target, when it is a top-level install."""
    if job.target.path != f"node_modules/{job.target.name}":
        return None
    try:
        manifest = read_manifest(job.project.path) or {}
    except ManifestError:
        return None
    for field in DEPENDENCY_FIELDS:
        spec = manifest.get(field, {}).get(job.target.name) if isinstance(manifest.get(field), dict) else None
        if isinstance(spec, str):
            return spec
    return None


def _declared(job: Job, requirers: bool) -> dict[str, str]:
    """Who declares which range on the target: package.json (a top-level install of a direct
    dependency) and, with `requirers`, every installed package that loads it from there."""
    found = {"package.json": spec} if (spec := _project_range(job)) else {}
    if requirers or not found:
        found.update({p.path: p.ranges[job.target.name] for p in _requirers(job)})
    return found


def _final_releases(inverter: Releases, name: str) -> list[str]:
    return [v for v in inverter.releases(REGISTRY, name) if semver.parse(v)]


def node_drift(inverter: Releases, job: Job) -> dict[str, Any] | None:
    """A release every declared range accepts but the lockfile does not pin, as a stale
    `npm update` or a lockfile bump pulled over an old node_modules leaves: another minor of the
    same major first (the newest newer one, else the oldest older one), so `npm ls` sees nothing."""
    now = semver.parse(job.base.get("version") or "")
    declared = _declared(job, requirers=True)
    if now is None or not declared:
        return None
    inside = [v for v in _final_releases(inverter, job.target.name) if semver.parse(v) != now
              and all(semver.satisfies(v, spec) is True for spec in declared.values())]
    other_minor = [v for v in inside if semver.parse(v)[:2] != now[:2]]  # type: ignore[index]
    same_major = [v for v in other_minor if semver.parse(v)[0] == now[0]]  # type: ignore[index]
    pool = same_major or other_minor
    if not pool:
        return None
    newer = [v for v in pool if semver.parse(v) > now]  # type: ignore[operator]
    drift = max(newer, key=semver.parse) if newer else min(pool, key=semver.parse)
    return {"drift_version": drift, "declared": "; ".join(f"{who} asks {spec}" for who, spec in sorted(declared.items())),
            "integrity": _package(job).integrity if _package(job) else ""}


def node_peer_conflict(inverter: Releases, job: Job) -> dict[str, Any] | None:
    """A release outside the range an installed package's peerDependencies ask of the target,
    inside every range package.json and the target's requirers declare: what
    `npm install --legacy-peer-deps` lets through. The newest such release. (A release outside a
    requirer's range is no peer conflict: npm nests a copy of the healthy release for it, which
    also holds what the break changed.)"""
    packages = job.healthy.node_packages
    by_path = {p.path: p for p in packages}
    dependents = sorted((p for p in packages if job.target.name in p.peers
                         and _resolve_from(p.path, job.target.name, by_path) == job.target.path), key=lambda p: p.path)
    declared = _declared(job, requirers=True)
    if not dependents or not declared:
        return None
    releases = _final_releases(inverter, job.target.name)
    for dependent in dependents:
        peer_range = dependent.peers[job.target.name]
        outside = [v for v in releases if semver.satisfies(v, peer_range) is False
                   and all(semver.satisfies(v, spec) is True for spec in declared.values())]
        if outside:
            return {"conflict_version": max(outside, key=semver.parse), "peer_of": dependent.name,
                    "peer_version": dependent.version, "peer_range": peer_range,
                    "declared": "; ".join(f"{who} asks {spec}" for who, spec in sorted(declared.items()))}
    return None


def _package(job: Job) -> NodePackage | None:
    return next((p for p in job.healthy.node_packages if p.path == job.target.path), None)


def node_bin(inverter: Releases, job: Job) -> dict[str, Any] | None:
    """The program of the target the tests run (its link in node_modules/.bin) and the file its
    package.json's `bin` names."""
    package, run = _package(job), job.target.attrs.get("bins_run") or []
    if package is None or not run or run[0] not in package.bins:
        return None
    return {"program": run[0], "bin_file": package.bins[run[0]].removeprefix("./"),
            "link": f"node_modules/.bin/{run[0]}"}


KINDS = frozenset({"node-package"})


def target_context(healthy: HealthyState, target: Target) -> dict[str, Any] | None:
    """The context every type of an npm package may use: its installed version."""
    return {"version": target.attrs.get("version") or ""}


PROVIDERS = {"node_entry": node_entry, "node_bad_version": node_bad_version, "node_drift": node_drift,
             "node_peer_conflict": node_peer_conflict, "node_bin": node_bin}
