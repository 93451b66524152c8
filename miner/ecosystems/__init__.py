"""The language ecosystems: which ones a project lives in, the runner serving a test command,
and the build every project gets.

Each ecosystem is a package here (python/, node/) holding everything language-specific: its
registry's sources, how a project is built, how its tests run and report per test (its Runners,
miner.ecosystems.base), what is installed, its part of the graph, its targets and the break
types' context providers. The stages (miner.sources, testing, healthy, graph, inverters,
validate, store, export) call through this module, never into a language's package; a
language's package imports only miner.ecosystems.base (what the core offers it), the models,
miner.projectfiles and miner.archives.

    runner_for("node --test test/")   # the Runner serving a test command (pytest by default)
    build_spec(project)               # the BuildSpec a sandbox backend runs

    detect(files, healthy)  # frozenset({"python"}), frozenset({"node"}), frozenset() ...
    primary(files, healthy) # the Ecosystem whose graph adapter and targets serve the project
    read_inventory(sandbox, root)   # what is installed, as HealthyState fields

"python": the project has Python files, or its healthy run has pytest's tests (ids of .py
files). "node": it has a package.json. A Dockerized project in neither (a program in any other
language) is known only through what its running program touches (its
healthy run traced: miner.sandbox.docker.trace); so is one outside Python: the Python
environment miner lays out beneath every project (its venv, pytest) is miner's, not the
project's, and the Python families (deps, virtualenv, the interpreter's settings) do not apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path, PurePosixPath

import networkx as nx

from miner.ecosystems.base import (
    CodeFacts,
    Criteria,
    Ecosystem,
    ManifestError,
    NameEntry,
    ProbeKind,
    RegistryDiscovery,
    Runner,
    TargetKit,
    Unchecked,
)
from miner.ecosystems.node import discover as node_discover
from miner.ecosystems.node import npm
from miner.ecosystems.node import providers as node_providers
from miner.ecosystems.node import registry as node_registry
from miner.ecosystems.node.graph import NodeGraph
from miner.ecosystems.node.runner import RUNNERS as NODE_RUNNERS
from miner.ecosystems.node.runner import project_command as node_project_command
from miner.ecosystems.node.runner import suite_problem as node_suite_problem
from miner.ecosystems.python import discover as python_discover
from miner.ecosystems.python import install as python_install
from miner.ecosystems.python import inventory as python_inventory
from miner.ecosystems.python import providers as python_providers
from miner.ecosystems.python import registry as python_registry
from miner.ecosystems.python import targets as python_targets
from miner.ecosystems.python.graph import PythonGraph
from miner.ecosystems.python.graph import target_nodes as python_target_nodes
from miner.ecosystems.python.pytest import DEFAULT_COMMAND
from miner.ecosystems.python.pytest import RUNNER as PYTEST
from miner.models import HealthyState, Probe, Project, Target
from miner.projectfiles import project_files
from miner.sandbox.base import BuildSpec, Limits, Sandbox

PYTHON = "python"
NODE = "node"

__all__ = ["CodeFacts", "Criteria", "Ecosystem", "ManifestError", "NameEntry", "Runner", "TargetKit", "Unchecked"]


def detect(files: Iterable[str], healthy: HealthyState) -> frozenset[str]:
    """The ecosystems of a project, from its files (project-relative) and its healthy run."""
    names = {PurePosixPath(f).name for f in files}
    suffixes = {PurePosixPath(f).suffix for f in files}
    found = set()
    if ".py" in suffixes or any(t.split("::", 1)[0].endswith(".py") for t in healthy.outcomes):
        found.add(PYTHON)
    if "package.json" in names:
        found.add(NODE)
    return frozenset(found)


# pytest comes last: it serves every command no other runner claims.
RUNNERS: tuple[Runner, ...] = (*NODE_RUNNERS, PYTEST)


def runner_for(command: str) -> Runner:
    """The runner serving a test command."""
    return next(runner for runner in RUNNERS if runner.claims(command))


def build_spec(project: Project, limits: Limits | None = None, *, backend: str = "local") -> BuildSpec:
    """How to build `project`: Python's part (the venv, the project's Python dependencies and
    pytest, laid out beneath every project), then npm's lines for a project with a package.json."""
    spec = python_install.build_spec(project, limits, backend=backend)
    more = npm.install_lines(Path(project.path))
    return replace(spec, install_script=spec.install_script + "".join(line + "\n" for line in more))


def project_command(root: Path) -> str:
    """A project's own test command: for a project without Python files whose package.json runs
    node's test runner or tape, that command; else pytest's."""
    if not any(f.endswith(".py") for f in project_files(root)) and (command := node_project_command(root)):
        return command
    return DEFAULT_COMMAND


def _node_targets(project: Project, healthy: HealthyState, files: list[str], kit: TargetKit) -> list[Target]:
    return [*npm.package_targets(project.path, healthy.node_packages), *npm.setting_targets(healthy.node_packages, project.path)]


ECOSYSTEMS: dict[str, Ecosystem] = {
    PYTHON: Ecosystem(PYTHON, graph=PythonGraph, targets=python_targets.targets,
                      target_nodes=python_target_nodes, observed=False, kinds=python_providers.KINDS,
                      target_context=python_providers.target_context, providers=python_providers.PROVIDERS,
                      releases=(python_providers.REGISTRY, python_providers.pip_index_versions),
                      probe_kinds=python_inventory.PROBE_KINDS),
    NODE: Ecosystem(NODE, graph=NodeGraph, targets=_node_targets, target_nodes=lambda graph, target: None,
                    observed=True, kinds=node_providers.KINDS, target_context=node_providers.target_context,
                    providers=node_providers.PROVIDERS, releases=(node_providers.REGISTRY, npm.registry_versions)),
}
# The registries' sources by prefix (miner.sources), the break types' context providers and the registries' release lookups, of every ecosystem.
SOURCES = {registry.prefix: registry for registry in (python_registry.SOURCE, node_registry.SOURCE)}
PROVIDERS = {name: provider for e in ECOSYSTEMS.values() for name, provider in e.providers.items()}
RELEASE_LOOKUPS = dict(e.releases for e in ECOSYSTEMS.values() if e.releases)
PROBE_KINDS = {kind.kind: kind for e in ECOSYSTEMS.values() for kind in e.probe_kinds}
# `miner discover --pypi NAMES`, `--npm NAMES`: each registry's names and checks.
DISCOVERIES: dict[str, RegistryDiscovery] = {d.prefix: d for d in (python_discover.DISCOVERY, node_discover.DISCOVERY)}


def judge_tree(paths: list[str], criteria: Criteria) -> tuple[bool, str]:
    """(kept, reason) of a repository judged on its file tree alone (`miner discover --github`):
    whether it ships a suite pytest collects (Python's judgment: GitHub's search is by language)."""
    return python_discover.judge_tree(paths, criteria)


def probe_kind(kind: str) -> ProbeKind | None:
    """The ecosystem's record of a derived probe's kind (None for the core's: http, command)."""
    return PROBE_KINDS.get(kind)


def published_source(project: Project) -> dict[str, str] | None:
    """The template variables of the project's published source at the mined version (its
    registry's copy: a pypi: source's sdist, an npm: source's tarball), None for a source without
    one (a folder; a git repository on a public host has one, but it cannot be validated here)."""
    registry = SOURCES.get(project.source.kind)
    published = registry.published(project.source.location) if registry else None
    return published.context() if published else None


def registry_hosts(kind: str, env: dict[str, str]) -> list[str]:
    """The hosts a repair fetching from the registry of sources `kind` reaches (pip's index for
    "pypi", npm's registry for "npm"), in an image whose environment is `env`."""
    registry = SOURCES.get(kind)
    return registry.hosts(env) if registry else []


def index_hosts(env: dict[str, str]) -> list[str]:
    """The hosts of the package index pip reaches (package-index evidence: the venv beneath every
    project is Python's)."""
    return registry_hosts(python_registry.SOURCE.prefix, env)


def target_context(healthy: HealthyState, target: Target) -> dict | None:
    """The context every break type of a target may use, from the ecosystem owning its kind
    ({} for a kind no ecosystem owns; None: the target is gone)."""
    owner = next((e for e in ECOSYSTEMS.values() if target.kind in e.kinds), None)
    return owner.target_context(healthy, target) if owner else {}


def code_facts(root: Path) -> CodeFacts:
    """What the project's code names (Python's parse; a project without Python files: nothing)."""
    files = [f for f in project_files(root) if f.endswith(".py")]
    return python_targets.code_facts(root, files) if files else CodeFacts()


def primary(files: Iterable[str], healthy: HealthyState) -> Ecosystem | None:
    """The ecosystem serving a project's graph and targets: Python's when it has Python code or
    tests, else Node's when it has a package.json, else none (known by observation only)."""
    found = detect(files, healthy)
    return next((ECOSYSTEMS[name] for name in (PYTHON, NODE) if name in found), None)


def observed(files: Iterable[str], healthy: HealthyState) -> bool:
    """Whether the project is known by what its traced run touched (outside Python)."""
    ecosystem = primary(files, healthy)
    return ecosystem is None or ecosystem.observed


def graph_adapter(files: Iterable[str], healthy: HealthyState) -> type | None:
    """The GraphAdapter class of the project's ecosystem (miner.graph.build), None for none."""
    ecosystem = primary(files, healthy)
    return ecosystem.graph if ecosystem else None


def targets(project: Project, healthy: HealthyState, files: list[str], kit: TargetKit) -> list[Target]:
    """The targets of the project's own ecosystem, the core's kinds (kit) placed among them
    (miner.inverters.targets adds the rest)."""
    ecosystem = primary(files, healthy)
    return ecosystem.targets(project, healthy, files, kit) if ecosystem else []


def target_nodes(graph: nx.DiGraph, target: Target) -> list[str] | None:
    """The graph nodes of a target of some ecosystem's own kinds, None for a core kind."""
    for ecosystem in ECOSYSTEMS.values():
        if (found := ecosystem.target_nodes(graph, target)) is not None:
            return found
    return None


def read_inventory(sandbox: Sandbox, root: Path) -> dict:
    """What is installed, as HealthyState fields: the venv's distributions (it lies beneath every
    project) and, for a project npm builds, its packages. Raises InventoryError."""
    site_packages, inventory, own = python_inventory.collect_inventory(sandbox)
    node_packages = npm.parse_inventory(sandbox.run(npm.inventory_command(), timeout=120).output) \
        if npm.uses_npm(root) else []
    return {"site_packages": site_packages, "inventory": inventory, "project_dists": own,
            "node_packages": node_packages}


def derived_probes(installed: dict) -> list[Probe]:
    """Probes derived from what is installed (Python's: `import pkg`, `script --help` of the
    project's own distributions)."""
    return python_inventory.discover_probes(installed["inventory"], installed["project_dists"])


def suite_problem(root: Path) -> str | None:
    """Why a project outside Python whose package.json names its tests cannot be measured (its
    test script runs a runner miner does not read), None otherwise: pytest would find nothing
    and say only that."""
    files = project_files(root)
    if "package.json" not in files or any(f.endswith(".py") for f in files):
        return None
    return node_suite_problem(root)
