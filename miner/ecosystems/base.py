"""What an ecosystem gives the core, and what the core offers it: its test runners (each a
Runner), its Ecosystem record (the graph adapter over GraphCalls, the targets with the core's
TargetKit, how its target kinds map to graph nodes, its context providers over a Job), and its
registry's sources (RegistrySource). An ecosystem's package imports only this, the models and
miner.projectfiles / miner.archives: the stages call it, never the other way round.

The core (miner.testing, miner.instruction, miner.solver_view, the export) never asks which
language a command belongs to; it asks miner.ecosystems.runner_for(command) for the Runner that
serves it and calls the Runner's functions. An ecosystem's package defines its Runners next to the
code they call (Python's: miner.ecosystems.python.pytest; Node's: miner.ecosystems.node.runner).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import networkx as nx

from miner.models import HealthyState, Probe, Project, Target, TestResult


def _nothing_refused(output: str) -> set[str]:
    return set()


@dataclass(frozen=True)
class Runner:
    """One test runner miner reads.

    claims(command)            whether a test command is this runner's
    suite_command(command, report, tests=None, deselect=())
                               the shell command running the suite (or `tests`) writing `report`
    parse_report(data)         per-test results from that report (the runner's own reporter or
                               structured events, never its console text); {} when unreadable
    check_command(command, id) the command a person runs to see one test
    run_passed(exit, output, healthy_outcome)
                               whether a person's run of check_command passed
    language, runtime          how the instruction names the language and where it runs
    verifier_spec(command)     how the exported verifier runs it (ValueError: it cannot)
    refused(output)            asked-for ids the runner refused to collect (it then ran nothing)
    file_errors_stand_for_tests
                               a file that fails before its tests run is reported as the file
                               alone; its tests take that file's error (miner.testing.observed)
    verifier_files             (name, bytes source) of the files the exported verifier needs
                               beside it in tests/ to run this runner (its reporter, its plugin)
    collect_reads              names of the files it reads when it collects tests, in the tests'
                               folders and above them: a break may not add one (rule 7)
    printed_forms(line)        the forms in which a person's run prints a line of a test's
                               reported message (the report may wrap or shorten what the console
                               shows): the solver's view looks for any of them
    volatile                   (pattern, replacement) of what differs between two runs of one
                               command under this runner (pytest's numbered temporary folders)
    """

    name: str
    language: str
    runtime: str
    claims: Callable[[str], bool]
    suite_command: Callable[..., str]
    parse_report: Callable[[bytes | str], dict[str, TestResult]]
    check_command: Callable[[str, str], str]
    run_passed: Callable[[int, str, str], bool]
    verifier_spec: Callable[[str], dict]
    refused: Callable[[str], set[str]] = _nothing_refused
    file_errors_stand_for_tests: bool = False
    verifier_files: tuple[tuple[str, Callable[[], bytes]], ...] = ()
    collect_reads: tuple[str, ...] = ()
    printed_forms: Callable[[str], list[str]] = lambda line: [line]
    volatile: tuple[tuple[re.Pattern[str], str], ...] = ()


@dataclass(frozen=True)
class ProbeKind:
    """A kind of probe an ecosystem derives from what is installed (Python's: `import` of the
    project's modules, its console `script`s' --help).

    label(rest)        its node's label in the graph (rest: the probe id after its kind)
    command(probe)     the shell command a person runs to see it ("": its argv, as run)
    printed(message)   the line of a failed run's message the command itself prints verbatim ("": none)
    stdout_only        its recorded digest is of its standard output alone
    """

    kind: str
    label: Callable[[str], str]
    command: Callable[[Probe], str]
    printed: Callable[[list[str]], str]
    stdout_only: bool = True


@dataclass(frozen=True)
class CodeFacts:
    """What the project's code names, from its ecosystem's parse (or a traced run's file names)."""

    strings: frozenset[str] = frozenset()  # string literals, path expressions, variable and program names
    env_reads: frozenset[str] = frozenset()  # environment variables read
    names: frozenset[str] = frozenset()  # last path component of each string
    env_defaults: frozenset[tuple[str, str, str]] = frozenset()  # (variable, default, file) of a read with one
    imports: frozenset[str] = frozenset()  # top-level modules imported (code and tests; `python -m x` too)

    def mentions(self, filename: str) -> bool:
        """Whether some string names the file (as itself or as a path ending in it)."""
        return filename in self.names


class GraphCalls(Protocol):
    """What miner.graph.build's GraphBuilder offers an ecosystem's GraphAdapter."""

    root: Path
    files: list[str]
    healthy: HealthyState
    graph: nx.DiGraph

    def node(self, node_id: str, kind: str, label: str, **attrs: object) -> str:
        """Add a node unless it exists; its id."""

    def edge(self, source: str, target: str, rel: str) -> None:
        """Add a "depends on" edge, once."""

    def envvar(self, name: str) -> str:
        """The node of an environment variable."""

    def file_targets(self, literal: str, near: str, listing: bool = False) -> list[str]:
        """The nodes of the project files a string literal names."""

    def file_kind(self, rel: str) -> str:
        """'config' or 'data'."""


@dataclass(frozen=True)
class TargetKit:
    """The target kinds no language owns, as miner.inverters.targets enumerates them, for an
    ecosystem's `targets` to place among its own: file_targets(root, files, healthy, facts),
    envvar_targets(healthy, facts), state_targets(project, facts)."""

    file_targets: Callable[[Path, list[str], HealthyState, CodeFacts], list[Target]]
    envvar_targets: Callable[[HealthyState, CodeFacts], list[Target]]
    state_targets: Callable[[Project, CodeFacts], list[Target]]


@dataclass
class Job:
    """Everything a context provider may look at for one (target, type) pair."""

    project: Project
    healthy: HealthyState
    target: Target
    rng: random.Random
    base: dict[str, Any]


class Releases(Protocol):
    """What a context provider may ask of the inverter: a registry's releases of a package."""

    def releases(self, registry: str, name: str) -> list[str]:
        """Release versions, newest first ([] when unknown)."""


class GraphAdapter(Protocol):
    """An ecosystem's part of a project's graph, called by miner.graph.build in this order."""

    def add_code(self) -> None:
        """The project's code and installed packages, before the tests and probes are drawn."""

    def link_test(self, node: str, test_id: str) -> None:
        """Edges from a test's node to what it runs."""

    def link_probe(self, node: str, kind: str, rest: str, probe: Probe | None) -> None:
        """Edges from a probe's node to what it runs."""

    def finish(self) -> None:
        """What needs the tests and probes drawn."""


@dataclass(frozen=True)
class Ecosystem:
    """The language a project lives in, as the graph and the target enumeration see it.

    graph(builder)             its GraphAdapter over miner.graph.build's GraphBuilder (GraphCalls)
    targets(project, healthy, files, kit)
                               its targets, with the core's kinds (TargetKit) placed among them
                               (the core adds what a traced run read, and extras)
    code_facts(root)           what its code names (config keys the code names are preferred)
    target_nodes(graph, target)
                               the graph nodes of a target of its own kinds, None for another kind
    observed                   its projects are also known by their traced run (outside Python:
                               the venv beneath them is miner's, not theirs)
    kinds, target_context(healthy, target)
                               its own target kinds, and the context every break type of such a
                               target may use (miner.inverters.procedural; None: the target is gone)
    providers                  its context providers by name (the break types' `context`):
                               provider(inverter, job) -> template variables or None
    releases                   (registry, lookup(name) -> versions newest first) of its registry
    probe_kinds                the kinds of probe it derives from what is installed (ProbeKind)
    """

    name: str
    graph: Callable[[GraphCalls], GraphAdapter]
    targets: Callable[[Project, HealthyState, list[str], TargetKit], list[Target]]
    target_nodes: Callable[[nx.DiGraph, Target], list[str] | None]
    observed: bool
    kinds: frozenset[str] = frozenset()
    target_context: Callable[[HealthyState, Target], dict | None] = lambda healthy, target: {}
    providers: dict[str, Callable[[Releases, Job], dict | None]] = field(default_factory=dict)
    releases: tuple[str, Callable[[str], list[str]]] | None = None
    probe_kinds: tuple[ProbeKind, ...] = ()


@dataclass(frozen=True)
class Published:
    """A registry's copy of a project at the mined version, which a repair may fetch its files from
    (`published-source` evidence).

    label   how the evidence names it ("textkit==1.2.0", "qs@6.17.1")
    holds   what of it holds the files ("its sdist", "its registry tarball")
    fetch   shell lines, run where the repair runs, leaving the project's files in one folder under
            "$D" (a file of it is "$D"/*/PATH)
    extra   more template variables for the break types (Python's: sdist_name, sdist_version)
    """

    label: str
    holds: str
    fetch: str
    extra: dict[str, str] = field(default_factory=dict)

    def context(self) -> dict[str, str]:
        """The template variables of a break type's `published_source` context."""
        return {"published": self.label, "published_holds": self.holds, "published_fetch": self.fetch, **self.extra}


def _unpublished(location: str) -> Published | None:
    return None


def _no_hosts(env: dict[str, str]) -> list[str]:
    return []


@dataclass(frozen=True)
class RegistrySource:
    """A language registry's sources (`pypi:NAME==VERSION`, `npm:NAME@VERSION`), for miner.sources.

    parse(text)            the location of `PREFIX:text` (ValueError with the reason)
    name(location)         the project's repository name (Project.repo)
    entry(cache, location) its cache folder
    fetch(source, cache, url, sha256)
                           the unpacked archive as a Project (miner.sources.FetchError)
    identity(location)     what makes two lines the same source
    published(location)    its copy on the registry a repair may fetch files from (Published)
    hosts(env)             the hosts a repair fetching from the registry reaches, from the
                           environment the image sets (the registry's own settings win)
    """

    prefix: str
    parse: Callable[[str], str]
    name: Callable[[str], str]
    entry: Callable[[Path, str], Path]
    fetch: Callable[..., Project]
    identity: Callable[[str], str] = lambda location: location
    published: Callable[[str], Published | None] = _unpublished
    hosts: Callable[[dict[str, str]], list[str]] = _no_hosts


class Unchecked(Exception):
    """A project could not be checked for a passing reason (the network): not recorded, retried next run."""


@dataclass(frozen=True)
class NameEntry:
    """One entry of a discovery's names file: a name with its version spec, or why it is not one."""

    text: str
    name: str = ""
    spec: str = ""
    problem: str = ""


@dataclass
class Criteria:
    """What a discovery keeps: projects with a compiled build step too, only projects with a Dockerfile."""

    allow_compiled: bool = False
    dockerized: bool = False


def _any_spec(spec: str) -> str | None:
    return None


@dataclass(frozen=True)
class RegistryDiscovery:
    """How `miner discover --PREFIX NAMES` reads and checks a names file's lines (miner.discover).

    entry(text)            a line as a NameEntry (`problem` set when it names no package)
    key(entry)             its identity across runs (the state file's key)
    check(entry, cache, criteria, index)
                           (kept, reason, the repos.txt line); Unchecked: ask again on the next run
    spec_problem(spec)     why a default version spec (`--version`) is not one, None when it is
    criteria()             what else a verdict depends on (the Python it was judged for)
    """

    prefix: str
    entry: Callable[[str], NameEntry]
    key: Callable[[NameEntry], str]
    check: Callable[[NameEntry, Path, Criteria, str | None], tuple[bool, str, str]]
    spec_problem: Callable[[str], str | None] = _any_spec
    criteria: Callable[[], str] = lambda: ""


class ManifestError(ValueError):
    """A project's manifest (package.json) that does not parse; the message says where."""


class InventoryError(Exception):
    """What is installed could not be read; the message says why."""

