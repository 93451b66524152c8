"""The records that flow between pipeline stages, as typed pydantic models.

Data flows one way: Source -> Project -> HealthyState -> Target/Inversion -> Candidate -> Task.
Every stage takes and returns these models; nothing below a stage imports from above it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Outcome = Literal["passed", "failed", "error", "skipped", "missing"]
SourceKind = Literal["git", "local", "pypi", "npm"]
TargetKind = Literal[
    "distribution",  # an installed distribution (name, version)
    "module",  # an importable top-level module of an installed distribution
    "config",  # a config file of the project (ini/cfg/toml/yaml/json)
    "data",  # a data file of the project the code or tests read
    "script",  # a console script (entry point) in the venv's bin/
    "envvar",  # an environment variable the code reads
    "syslib",  # a shared library (containers only)
    "debpkg",  # a Debian package (containers only)
    "system",  # a system-wide file or setting (containers only)
    "service",  # a Dockerized service (containers only)
    "submodule",  # a module file below an installed distribution's top level (pkg/sub.py)
    "bytecode",  # the cached bytecode of a module (the project's or a dependency's)
    "setting",  # a process-wide setting the code relies on without naming it (TLS trust, proxy, locale, ...)
    "state",  # run-time state the code keeps outside its files: a lock or PID file, a cache folder
    "compound",  # several validated inversions stacked into one task (miner.compound)
    "node-package",  # a package installed in the project's node_modules (npm's projects)
]

# Fixed paths every sandbox backend provides, so break/fix scripts are sandbox-neutral.
SANDBOX_ROOT = "/sandbox"
PROJECT_DIR = "/sandbox/project"
VENV_DIR = "/sandbox/venv"
HOME_DIR = "/sandbox/home"  # $HOME of every sandbox shell
# The shell rc file holding the environment the project runs in (the venv on PATH, the project's
# variables): every bash reads it (see miner.sandbox.layout); break and fix scripts name it
# $MINER_ENV_FILE.
ENV_FILE = f"{HOME_DIR}/.bashrc"


def content_id(*parts: Any, length: int = 16) -> str:
    """A stable hash of JSON-serialisable parts: ids that collapse duplicates by themselves."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


class Source(BaseModel):
    """One line of repos.txt."""

    raw: str
    kind: SourceKind
    location: str  # URL, absolute folder path, NAME==VERSION for pypi, NAME@VERSION for npm
    ref: str | None = None
    overrides: dict[str, str] = Field(default_factory=dict)
    origin: str = ""  # "FILE:LINE"

    @property
    def name(self) -> str:
        """A short, filesystem-safe project name."""
        if self.kind == "pypi":
            return self.location.split("==")[0].lower()
        if self.kind == "npm":
            return self.location.rpartition("@")[0].lstrip("@").replace("/", "-")
        stem = self.location.rstrip("/").rsplit("/", 1)[-1]
        return stem.removesuffix(".git") or "project"


class SourceError(BaseModel):
    """A repos.txt line that could not be parsed: reported as FILE:LINE: reason."""

    origin: str
    line: str
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.reason}"


class Project(BaseModel):
    """A fetched source: a folder on the host holding the project's files at a pinned revision."""

    source: Source
    repo: str  # canonical repository name (URL, folder or pypi:NAME)
    commit: str  # resolved commit, or a content hash for folders and sdists
    path: Path  # host folder with the project files (read-only for later stages)

    @property
    def key(self) -> str:
        return content_id(self.repo, self.commit, self.source.overrides)


class RunResult(BaseModel):
    """The result of one command run inside a sandbox."""

    command: str
    exit_code: int
    output: str  # stdout and stderr, interleaved
    duration: float
    timed_out: bool = False


class TestResult(BaseModel):
    """One test (or derived probe) outcome."""

    id: str
    outcome: Outcome
    duration: float = 0.0
    message: str = ""  # first lines of the failure, for instructions


class SuiteRun(BaseModel):
    """One run of the test suite plus derived probes."""

    command: str
    exit_code: int
    duration: float
    results: dict[str, TestResult] = Field(default_factory=dict)
    output_tail: str = ""
    timed_out: bool = False

    def outcomes(self) -> dict[str, Outcome]:
        return {k: v.outcome for k, v in self.results.items()}


class Probe(BaseModel):
    """A derived check recorded from healthy behaviour (import, console script --help, ...)."""

    id: str  # e.g. "probe::import::greeter", "probe::script::greet --help"
    kind: Literal["import", "script", "command", "http"]
    argv: list[str] = Field(default_factory=list)
    module: str | None = None
    url: str | None = None
    expected_exit: int | None = None
    expected_digest: str | None = None


class Distribution(BaseModel):
    """An installed distribution, read from its metadata inside the sandbox."""

    name: str
    version: str
    top_level: list[str] = Field(default_factory=list)  # importable top-level modules
    requires: list[str] = Field(default_factory=list)  # Requires-Dist names (markers applied)
    requirements: list[str] = Field(default_factory=list)  # the same as "name specifier" strings ("six>=1.5")
    extensions: list[str] = Field(default_factory=list)  # site-packages-relative compiled modules (.so)
    console_scripts: dict[str, str] = Field(default_factory=dict)  # script -> "module:attr"
    files: list[str] = Field(default_factory=list)  # site-packages-relative paths of its .py files


class NodePackage(BaseModel):
    """One package installed in the project's node_modules (miner.ecosystems.node.npm)."""

    path: str  # project-relative install folder: node_modules/a, node_modules/a/node_modules/b
    name: str
    version: str = ""
    dev: bool = False  # only dev dependencies need it
    requires: list[str] = Field(default_factory=list)  # the packages it depends on, by name
    entry: str | None = None  # project-relative file `require` loads, None when none resolves
    # (the fields below came later: a healthy state recorded before them loads with them empty)
    ranges: dict[str, str] = Field(default_factory=dict)  # dependency name -> the range it declares
    peers: dict[str, str] = Field(default_factory=dict)  # peerDependencies: name -> range
    bins: dict[str, str] = Field(default_factory=dict)  # program name -> package-relative file
    integrity: str = ""  # the tarball's hash npm's lockfile records


class HealthyState(BaseModel):
    """Everything measured on the untouched environment."""

    repo: str
    commit: str
    backend: str
    test_command: str
    outcomes: dict[str, Outcome]  # stable outcomes (flaky excluded)
    durations: dict[str, float] = Field(default_factory=dict)
    flaky: list[str] = Field(default_factory=list)
    probes: list[Probe] = Field(default_factory=list)
    distributions: dict[str, str] = Field(default_factory=dict)  # name -> version
    inventory: list[Distribution] = Field(default_factory=list)  # full metadata of each
    project_dists: list[str] = Field(default_factory=list)  # the project's own distribution(s)
    node_packages: list[NodePackage] = Field(default_factory=list)  # the project's node_modules, npm's projects
    file_hashes: dict[str, str] = Field(default_factory=dict)  # project-relative path -> sha256
    protected: list[str] = Field(default_factory=list)  # project-relative code and test files
    env: dict[str, str] = Field(default_factory=dict)
    site_packages: str = ""
    suite_seconds: float = 0.0  # wall time of one healthy suite run
    messages: dict[str, str] = Field(default_factory=dict)
    # Beneath the project (container backends): what Backend.observe saw (shared libraries the
    # extension modules load, their Debian packages and versions, which import loads which
    # extension, a Dockerized service's config and imports; see miner.sandbox.docker.observe).
    system: dict[str, Any] | None = None

    @property
    def passing(self) -> list[str]:
        return sorted(k for k, v in self.outcomes.items() if v == "passed")


EvidenceKind = Literal["reversible", "package-index", "debian-archive", "project-files", "published-source"]


class Evidence(BaseModel):
    """Where a competent person recovers the healthy state from (rule 8; see miner.evidence)."""

    kind: EvidenceKind
    detail: str = ""  # what and where: "six==1.17.0", "README.md states WEATHER_UNITS=metric"

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


class EvidenceTemplate(BaseModel):
    """A catalogue type's evidence: kind and detail are jinja2 templates rendered per target (the
    kind is usually one of the evidence kinds itself, or names the target's, e.g. "{{ target.attrs.evidence }}")."""

    kind: str
    detail: str = ""


class InversionType(BaseModel):
    """One entry of the inversions/ catalogue: a kind of break, as data."""

    id: str  # family/name
    family: str
    description: str
    target: TargetKind
    preconditions: dict[str, Any] = Field(default_factory=dict)
    backends: list[str] = Field(default_factory=lambda: ["local", "docker"])
    network: dict[str, bool] = Field(default_factory=dict)  # {"break": bool, "fix": bool}
    whole_suite: bool = False  # a break expected to kill the whole suite (its own label)
    evidence: list[EvidenceTemplate] = Field(default_factory=list)  # what its fixes recover from (templates)
    summary: str  # jinja2 template of a one-line summary
    break_script: str  # jinja2 template
    fix_script: str  # jinja2 template
    weight: float = Field(default=1.0, gt=0)
    category: str = ""  # what kind of real breakage it stands for (miner.catalogue.CATEGORIES)


class Target(BaseModel):
    """A node of the project worth breaking."""

    kind: TargetKind
    name: str
    path: str | None = None  # sandbox path or project-relative path
    attrs: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"


class Inversion(BaseModel):
    """One concrete break: a type applied to a target, with rendered scripts."""

    type_id: str
    family: str
    target: Target
    break_script: str
    fix_script: str
    summary: str
    network_break: bool = False
    network_fix: bool = False
    predicted_f2p: list[str] | None = None
    graph_depth: int | None = None
    evidence: list[Evidence] = Field(default_factory=list)  # what the fix recovers from (rule 8)
    no_evidence: str = ""  # why no evidence could be established: a pair recorded as unrecoverable, never run

    def id_for(self, project: Project) -> str:
        return content_id(project.repo, project.commit, self.type_id, self.target.key, self.break_script)


RejectRule = Literal[
    "break-failed",  # rule 1: break script failed or timed out
    "no-f2p",  # rule 2: nothing broke
    "no-p2p",  # rule 2: everything broke (and the type is not a whole-suite type)
    "protected-changed",  # rule 3
    "fix-failed",  # rule 4
    "not-reproducible",  # rule 5
    "answer-leaked",  # rule 6
    "test-tree-changed",  # rule 7: the tests (code, data, runner config) are the judge
    "unrecoverable",  # rule 8: no evidence, or the fix carries a copy of the answer
    "solver-view",  # the instruction's command does not show the symptom in a solver's shell
    "hangs",  # a test run of the candidate ran over its limit (miner.validate.HANG_FACTOR)
    "duplicate-symptom",  # same family and F2P set as a task already stored for the project
    "overlapping-parts",  # a compound whose parts share a target or branch, or one part's fix repairs another's
    "unsupported",  # the backend cannot run this type
    "trivial",  # a task-blind repair of the ladder repairs it (crawl --refuse-trivial, miner.ladder)
]


class SolverView(BaseModel):
    """What a solver meets: the instruction's command, run in a solver's shells (miner.solver_view),
    fails before the fix (showing `line` when not empty) and passes after it."""

    command: str  # run in PROJECT_DIR
    check: str  # the failing test or probe id it shows
    outcome: str  # that check's broken outcome (failed, error, skipped, missing)
    line: str = ""  # the instruction's first error line, when the command prints it verbatim
    probe: Probe | None = None  # a probe check: its healthy exit code and output digest


class Candidate(BaseModel):
    """A validated or rejected inversion with the evidence."""

    id: str
    repo: str
    commit: str
    inversion: Inversion
    status: Literal["validated", "rejected"]
    rule: RejectRule | None = None
    detail: str = ""
    f2p: list[str] = Field(default_factory=list)
    p2p: list[str] = Field(default_factory=list)
    broken: dict[str, Outcome] = Field(default_factory=dict)
    fixed: dict[str, Outcome] = Field(default_factory=dict)
    broken_messages: dict[str, str] = Field(default_factory=dict)
    suite_runs: float = 0.0  # full-suite equivalents (a run of k of n tests counts k/n)
    seconds: float = 0.0
    logs: dict[str, str] = Field(default_factory=dict)  # name -> text (break, fix outputs)
    timings: dict[str, float] = Field(default_factory=dict)  # phase -> seconds (see miner.timing)


INSTRUCTION_VARIANTS = ("symptom", "hard", "hinted")


class Part(BaseModel):
    """One validated inversion stacked into a compound task, with what it alone broke and needs."""

    task_id: str  # the stored single task it came from
    type_id: str
    family: str
    category: str = ""
    target: Target
    summary: str = ""
    f2p: list[str] = Field(default_factory=list)
    graph_depth: int | None = None
    difficulty_score: float = 0.0
    evidence: list[Evidence] = Field(default_factory=list)


class Task(BaseModel):
    """A validated inversion plus everything needed to rebuild, verify and export it."""

    id: str
    repo: str
    commit: str
    source: Source
    type_id: str
    family: str
    target: Target
    summary: str
    break_script: str
    fix_script: str
    f2p: list[str]
    p2p: list[str]
    predicted_f2p: list[str] | None = None
    difficulty: str = "medium"
    difficulty_score: float = 0.0
    # The first rung of the blind-repair ladder that repairs it (miner.ladder), "needs-diagnosis"
    # when none does; None until measured (`miner ladder`).
    blind_repair: str | None = None
    graph_depth: int | None = None
    instruction: str = ""
    whole_suite: bool = False
    test_command: str = ""
    probes: list[Probe] = Field(default_factory=list)
    protected: dict[str, str] = Field(default_factory=dict)  # path -> sha256
    suite_seconds: float = 0.0
    backend: str = "local"
    created: str = ""
    model: str | None = None  # the model whose submission this is (None: procedural)
    evidence: list[Evidence] = Field(default_factory=list)  # what a repair recovers from (rule 8)
    solver_view: SolverView | None = None  # the instruction's command and what it shows (miner check)
    category: str = ""  # the type's category (a compound's: "compound"; its parts keep theirs)
    instructions: dict[str, str] = Field(default_factory=dict)  # variant (INSTRUCTION_VARIANTS) -> text
    parts: list[Part] = Field(default_factory=list)  # a compound task's parts, in break order

    @property
    def type_ids(self) -> list[str]:
        """Its type and, for a compound task, its parts' types."""
        return [self.type_id, *(p.type_id for p in self.parts)]
