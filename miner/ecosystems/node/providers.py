"""Node's context providers for miner.inverters.procedural: the file `require` loads of an
installed package, and an older release of it on npm's registry.

Each provider takes the inverter (its cached `releases`) and the Job, and returns the type's
template variables, or None when the pair does not apply.
"""

from __future__ import annotations

from typing import Any

from miner.ecosystems.base import Job, Releases
from miner.ecosystems.releases import older_release
from miner.models import HealthyState, Target

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


KINDS = frozenset({"node-package"})


def target_context(healthy: HealthyState, target: Target) -> dict[str, Any] | None:
    """The context every type of an npm package may use: its installed version."""
    return {"version": target.attrs.get("version") or ""}


PROVIDERS = {"node_entry": node_entry, "node_bad_version": node_bad_version}
