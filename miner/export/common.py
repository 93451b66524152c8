"""What every export format shares: the task's build context, its Dockerfile, its verifier.

An exported task rebuilds the exact environment miner validated, from its own files only, with
the image layout of the Docker backend (miner.sandbox.docker.layout: the same stage text, build
script, environment file and variables):

    environment/
      Dockerfile          stage "healthy": FROM the base image, the project unpacked at
                          /sandbox/project, a venv at /sandbox/venv, the install script run with
                          the healthy distributions pinned; then one layer running the break
                          script (layout.break_dockerfile) and deleting it
      project.tar.gz      the project's files at the mined commit (deterministic archive)
      build/              build.sh, install.sh, the shell's startup files (bashrc: the environment,
                          profile, shell-hook.sh), constraints.txt (removed after the build)
      break.sh
      host-ca.crt         the host's CA bundle, when pip needs it to reach the index
    tests/                test.sh, the static boot tool and the runtime list it checks
                          (miner.export.trusted), verifier.py and verifier_system.py (see
                          miner/assets/verifier.py), the guard, probe.py, spec.json,
                          manifest.json and originals/ (the test files)

Rule 8's evidence travels with every task (`evidence_metadata`), and so does the route its repair
needs (`network_route`): no network at all, or the hosts of the package index (pip's, as the image
is configured) and of the Debian archive. Each format declares both in its own way.

The healthy manifest (manifest.json) is measured once per project: the "healthy" stage is built
in the local Docker engine and the verifier's --collect mode runs in it. Everything written is
deterministic, so exporting twice gives byte-identical folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path, PurePosixPath

from miner import __version__
from miner import ecosystems
from miner.evidence import NETWORK_EVIDENCE
from miner.export.archive import walk
from miner.export.dockerized import (
    CONTEXT_ROOT,
    CONTEXT_STAGE,
    DockerfileError,
    context_tarball,
    image_config,
    rewrite,
)
from miner.models import ENV_FILE, INSTRUCTION_VARIANTS, PROJECT_DIR, VENV_DIR, HealthyState, Project, Task, content_id
from miner.sandbox.base import BuildSpec
from miner.export.trusted import BOOT_NAME, RUNTIME_NAME, BootBuildError, boot_binary, runtime_text
from miner.sandbox.docker import gateway, images, layout
from miner.sandbox.docker.container import fork_labels

DEFAULT_BASE_IMAGE = images.BOOTSTRAP_TAG  # the image `miner images bootstrap` builds
DEFAULT_ORG = "miner"
ORG = r"[a-zA-Z0-9][a-zA-Z0-9._-]*"  # a package owner, as Harbor's names have it
ORG_NAME = rf"{ORG}/{ORG}"  # Harbor's package and dataset names
CATEGORY = "environment-repair"
BUILD_TOOLS = {"pip", "setuptools", "wheel", "distribute"}  # never pinned: build isolation needs new ones
TEST_DIR_NAMES = {"test", "tests", "testing"}
MANIFEST_TIMEOUT = 600
HEALTHY_SUITE_TIMEOUT = 1800  # seconds the healthy suite may take in the healthy image
ARCHIVE_HOSTS = ("deb.debian.org", "security.debian.org")  # the Debian archive of the images
NETWORK_POLICIES = ("compose", "harbor")
VERIFIER_MODES = ("separate", "shared")


def _restore_module():
    """miner/assets/restore.py, standalone in a task's tests/, loaded here for its shared names."""
    import importlib.util

    with resources.as_file(resources.files("miner").joinpath("assets", "restore.py")) as path:
        spec = importlib.util.spec_from_file_location("miner_restore", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


_restore = _restore_module()
MARKER, SNAPSHOT = _restore.MARKER, _restore.SNAPSHOT  # the separate verifier's time mark and collect command


class ExportError(Exception):
    """A task cannot be exported; the message says why."""


@dataclass
class ExportOptions:
    """Settings shared by every exported task."""

    org: str = DEFAULT_ORG
    base_image: str = DEFAULT_BASE_IMAGE
    overwrite: bool = False
    cpus: int = 1
    memory_mb: int = 4096
    storage_mb: int = 10240
    build_timeout_sec: float = 1200.0
    cache_dir: Path | None = None  # fetched sources and healthy manifests (default: the store's cache/)
    # Where a Harbor task declares the network its repair needs (see miner.export.harbor):
    # "compose" in its docker-compose.yaml (what Harbor's docker environment enforces as it is),
    # "harbor" also as [environment] network_mode / allowed_hosts (needs Harbor's egress control).
    network_policy: str = "compose"
    # Where Harbor runs the verifier: "separate" (a fresh container of the task's image, the agent's
    # changes carried over as data, none of its processes) or "shared" (the agent's container).
    verifier_mode: str = "separate"
    variant: str = "symptom"  # which instruction the tasks carry (models.INSTRUCTION_VARIANTS)
    version: str = "1.0.0"  # of each task and of the dataset (Harbor's [task] / [dataset] version)
    authors: tuple[str, ...] = ("miner",)  # 'Name' or 'Name <email>'
    dataset: str | None = None  # ORG/NAME: also write a Harbor dataset (dataset.toml + card) in the folder
    images: bool = False  # Harbor: name a pre-built image in each task, built after the export (export.images)
    registry: str | None = None  # with images: push them there (else one archive, images.tar)

    def __post_init__(self) -> None:
        if not re.fullmatch(ORG, self.org) or ".." in self.org:
            raise ValueError(f"--org must look like a package owner (letters, digits, . _ -), not {self.org!r}")
        if self.network_policy not in NETWORK_POLICIES:
            raise ValueError(f"--network-policy must be one of {', '.join(NETWORK_POLICIES)}, "
                             f"not {self.network_policy!r}")
        if self.verifier_mode not in VERIFIER_MODES:
            raise ValueError(f"--verifier-mode must be one of {', '.join(VERIFIER_MODES)}, not {self.verifier_mode!r}")
        if self.dataset is not None and (".." in self.dataset or not re.fullmatch(ORG_NAME, self.dataset)):
            raise ValueError(f"--dataset must be ORG/NAME (letters, digits, . _ -), not {self.dataset!r}")
        if self.variant not in INSTRUCTION_VARIANTS:
            raise ValueError(f"--variant must be one of {', '.join(INSTRUCTION_VARIANTS)}, not {self.variant!r}")


@dataclass
class TaskSource:
    """Everything an exporter needs about one stored task."""

    task: Task
    project: Project
    spec: BuildSpec
    healthy: HealthyState | None
    name: str  # folder name and the part of the Harbor name after "ORG/"
    dockerized: bool = False  # mined from the project's own Dockerfile (see miner.export.dockerized)
    variant: str = "symptom"  # the instruction variant exported (models.INSTRUCTION_VARIANTS)
    dropped: list[str] = field(default_factory=list)  # P2P tests the healthy image does not pass


# -- names, timeouts ----------------------------------------------------------------------------


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "task"


def task_slug(task: Task, variant: str = "symptom") -> str:
    """A stable, readable, unique folder name: project, inversion type, id prefix (and the
    instruction variant, when it is not the default one)."""
    name = f"{slug(task.source.name)[:40]}__{slug(task.type_id.replace('/', '-'))}__{task.id[:10]}"
    return name if variant == "symptom" else f"{name}__{variant}"


def test_timeout(task: Task) -> int:
    """Seconds the verifier's pytest run may take: generous against a slower machine."""
    return int(max(120, 4 * task.suite_seconds + 60))


def verifier_timeout(task: Task) -> float:
    return float(test_timeout(task) + 180)  # static checks, probes, bytecode compiled afresh


def agent_timeout(task: Task) -> float:
    return float(max(900, 60 * round((30 * task.suite_seconds + 600) / 60)))


# -- evidence and the network the repair needs (rule 8) ------------------------------------------------


def evidence_metadata(task: Task) -> dict:
    """What every format records of a task's evidence: the kinds and where, one line each."""
    return {"evidence_kinds": sorted({e.kind for e in task.evidence}), "evidence": [str(e) for e in task.evidence]}


@dataclass(frozen=True)
class NetworkRoute:
    """What a repair of the task must reach: nothing (hosts empty), or the index's and the archive's hosts."""

    hosts: tuple[str, ...] = ()

    @property
    def needed(self) -> bool:
        return bool(self.hosts)


def network_route(task: Task, pip_env: dict[str, str] | None = None) -> NetworkRoute:
    """The hosts the task's repair needs, from its evidence: the package index pip uses in the image
    (its default, or the forwarded PIP_* URLs) for package-index, the registry of the task's source
    for published-source (pip's index for a PyPI sdist, npm's registry for an npm tarball), the
    Debian archive for debian-archive; none for the rest (and for a task recorded without evidence)."""
    kinds = {e.kind for e in task.evidence} & NETWORK_EVIDENCE
    env = pip_env or {}
    hosts: list[str] = []
    if "package-index" in kinds:
        hosts += ecosystems.index_hosts(env)
    if "published-source" in kinds:
        hosts += ecosystems.registry_hosts(task.source.kind, env)
    if "debian-archive" in kinds:
        hosts += ARCHIVE_HOSTS
    return NetworkRoute(tuple(dict.fromkeys(hosts)))


# -- the build context ------------------------------------------------------------------------------


def constraints(healthy: HealthyState | None) -> str:
    """Pins of every healthy distribution except the project's own and the build tools."""
    if healthy is None:
        return ""
    own = set(healthy.project_dists)
    lines = [f"{name}=={version}" for name, version in sorted(healthy.distributions.items())
             if name not in own and name not in BUILD_TOOLS]
    return "\n".join(lines) + ("\n" if lines else "")


def build_files(ts: TaskSource) -> dict[str, str]:
    """build/ of the context: the layout's build files (miner.sandbox.docker.layout.build_files) with
    the healthy distributions pinned; the healthy stage runs them and removes them in one layer."""
    files = layout.build_files(ts.spec, ts.dockerized, constraints(ts.healthy))
    return {f"build/{name}": text for name, text in files.items()}


@dataclass
class PipForwarding:
    """The host's pip settings a container build needs (index, CA bundle), read once per export."""

    env: dict[str, str] = field(default_factory=dict)
    cert: bytes | None = None

    @classmethod
    def from_host(cls) -> PipForwarding:
        settings = images.host_pip_settings()
        cert = settings.cert.read_bytes() if settings.cert and settings.cert.is_file() else None
        return cls(env=settings.env(), cert=cert)


def site_packages(ts: TaskSource) -> str:
    """The venv's site-packages as the healthy state recorded it (it names the interpreter's version)."""
    path = ts.healthy.site_packages if ts.healthy else ""
    if not path.startswith(VENV_DIR + "/"):
        raise ExportError(f"the healthy state of {ts.task.repo} at {ts.task.commit[:12]} is not in the store "
                          "(its site-packages is unknown): crawl the project again")
    return path


def project_stages(ts: TaskSource, base_image: str, prefix: str = "", checkout: bool = False) -> tuple[str, str]:
    """The stages before "healthy" and the one it builds on: none and the base image, or, for a
    Dockerized project, its own Dockerfile rewritten (miner.export.dockerized) and its last stage."""
    if not ts.dockerized:
        return "", base_image
    try:
        return rewrite((ts.project.path / "Dockerfile").read_text(errors="replace"), base_image, prefix, checkout)
    except DockerfileError as exc:
        raise ExportError(f"cannot export the Dockerfile of {ts.task.repo}: {exc}") from None


def healthy_stage(ts: TaskSource, base_image: str, pip: PipForwarding, prefix: str = "",
                  tools_stage: str = "", checkout: bool = False) -> str:
    """The Dockerfile text up to the healthy stage (layout.healthy_stage); `prefix` is the context
    folder of the files, `tools_stage` (a template with {base}) a stage put between the base and
    the healthy stage, and `checkout` says the build context is the project's checkout (see
    miner.export.jsonl): then the build files are written by the Dockerfile itself."""
    before, parent = project_stages(ts, base_image, prefix, checkout)
    if tools_stage:
        before, parent = before + tools_stage.format(base=parent), "tools"
    if ts.dockerized:
        project = "." if checkout else f"--from={CONTEXT_STAGE} {CONTEXT_ROOT}/"
    else:
        project = "." if checkout else f"{prefix}project.tar.gz"
    inline = {name.removeprefix("build/"): text for name, text in build_files(ts).items()} if checkout else None
    stage = layout.healthy_stage(
        parent, name="healthy", env=layout.image_env(site_packages(ts), ts.dockerized) | pip.env,
        project_source=project, dockerized=ts.dockerized, build_source=f"{prefix}build/", build_inline=inline,
        ca_source=f"{prefix}{layout.HOST_CA_NAME}" if pip.cert is not None else "",
    )
    return before + stage


# The image's last layer: a file whose time stamp tells what the agent changed (restore.py).
BUILT_MARKER = f"RUN mkdir -p {os.path.dirname(MARKER)} && touch {MARKER}\n"


def dockerfile(ts: TaskSource, base_image: str, pip: PipForwarding, prefix: str = "",
               tools_stage: str = "", marker: bool = False) -> str:
    """The task's whole Dockerfile: the healthy stage (see healthy_stage), then the break layer
    (and, with `marker`, the layer a separate verifier dates the agent's changes from)."""
    header = (f"# miner task {ts.task.id}: {ts.task.type_id} on {ts.task.target.key}\n"
              f"# project {ts.task.repo} at {ts.task.commit} (exported by miner {__version__})\n")
    breaking = layout.break_dockerfile("healthy", "break.sh", context_dir=prefix)
    stage = healthy_stage(ts, base_image, pip, prefix, tools_stage)
    return header + stage + "\n" + breaking + (BUILT_MARKER if marker else "") + final_lines(ts)


# The harnesses keep a task's container alive with `sleep infinity` and wait for it to be healthy:
# a Dockerized service's HEALTHCHECK would never pass there. The verifier runs it (manifest.json).
DOCKERIZED_TAIL = "HEALTHCHECK NONE\n"


def final_lines(ts: TaskSource) -> str:
    """The last lines of a task's Dockerfile, after the break layer."""
    return DOCKERIZED_TAIL if ts.dockerized else f"WORKDIR {PROJECT_DIR}\n"


def environment_files(ts: TaskSource, pip: PipForwarding, tarball: bytes) -> dict[str, bytes]:
    """The build context files (without the Dockerfile)."""
    if ts.dockerized:
        tarball = context_tarball(ts.project.path, tarball)
    files = {"project.tar.gz": tarball, "break.sh": ts.task.break_script.encode()}
    files |= {k: v.encode() for k, v in build_files(ts).items()}
    if pip.cert is not None:
        files[layout.HOST_CA_NAME] = pip.cert
    return files


# -- the healthy manifest -------------------------------------------------------------------------


# The files each test runner's verifier mode needs beside it (its reporter, pytest's plugin).
RUNNER_FILES = {name: source for runner in ecosystems.RUNNERS for name, source in runner.verifier_files}


def asset(name: str) -> bytes:
    if name in RUNNER_FILES:
        return RUNNER_FILES[name]()
    return resources.files("miner").joinpath("assets", name).read_bytes()


VERIFIER_ASSETS = ("verifier.py", "verifier_system.py")
# Every file of miner's own that tests/ carries (miner check refuses a folder where one differs).
VERIFIER_FILES = (*VERIFIER_ASSETS, "probe.py", "restore.py", *RUNNER_FILES)
TESTS_DIGEST_KEY = "tests_sha256sums"  # task.toml [metadata]: sha256 of tests/SHA256SUMS
COLLECTOR_DIR = "/tmp/miner-verifier"
# The collector runs the verifier as the boot tool will (isolated, no site, no bytecode, UTF-8 mode),
# so that the runtime list it measures holds what scoring loads.
COLLECT = (  # run with `bash -c`: bash reads the environment (~/.bashrc) through the image's BASH_ENV
    f"cd {PROJECT_DIR}; "
    "for py in /usr/bin/python3 /usr/local/bin/python3; do "
    f'[ -x "$py" ] && exec "$(readlink -f "$py")" -I -S -B -X utf8 {COLLECTOR_DIR}/verifier.py --collect; done; '
    "echo 'no system python3 in the image' >&2; exit 3"
)


def verifier_digest() -> str:
    """What the healthy manifest depends on besides the image: the collector's code."""
    return hashlib.sha256(b"".join(asset(name) for name in VERIFIER_ASSETS)).hexdigest()


class ManifestCache:
    """Healthy manifests by build-context hash: memory, then disk, then a build in Docker; and the
    verifier's boot tool, compiled once (miner.export.trusted)."""

    def __init__(self, folder: Path, client=None) -> None:
        self.folder = Path(folder)
        self.client = client
        self.memory: dict[str, dict] = {}
        self.built = 0
        self._boot: bytes | None = None

    def boot(self) -> bytes:
        """The static boot tool every exported verifier starts with."""
        if self._boot is None:
            try:
                self._boot = boot_binary(self.folder.parent / "boot")
            except BootBuildError as exc:
                raise ExportError(str(exc)) from None
        return self._boot

    def get(self, stage: str, files: dict[str, bytes], test_command: str, tests: bool = True) -> dict:
        """The healthy stage's manifest (the verifier's --collect output), with `healthy_outcomes`:
        the suite run by `test_command` in that image, per test (none for a task whose checks are
        its probes alone, `tests` False: a Dockerized service without a suite)."""
        context = {k: v for k, v in files.items() if k != "break.sh"}
        build = content_id(stage, {k: hashlib.sha256(v).hexdigest() for k, v in sorted(context.items())}, length=24)
        key = content_id(build, verifier_digest(), test_command if tests else "", length=24)
        if key in self.memory:
            return self.memory[key]
        path = self.folder / f"{key}.json"
        if path.is_file():
            self.memory[key] = json.loads(path.read_text())
            return self.memory[key]
        manifest = self._measure(build, stage, context, test_command if tests else None)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{uuid.uuid4().hex[:6]}.tmp")
        tmp.write_text(json.dumps(manifest, sort_keys=True))
        tmp.replace(path)
        self.memory[key] = manifest
        return manifest

    def _client(self):
        if self.client is None:
            self.client = images.docker_client()
        return self.client

    def _measure(self, key: str, stage: str, context: dict[str, bytes], test_command: str | None) -> dict:
        """Build the healthy stage (tagged by its inputs: a rebuild reuses the tag and Docker's layer
        cache, which later builds of the task's own Dockerfile share), run --collect and the suite inside it."""
        client = self._client()
        tag = f"miner/export-healthy:{key}"
        image = None
        with tempfile.TemporaryDirectory(prefix="miner-export-") as tmp:
            write_files(Path(tmp), context | {"Dockerfile": stage.encode()})
            project_stage = HEALTHY_PARENT.search(stage) if f" AS {CONTEXT_STAGE}\n" in stage else None
            if project_stage:  # a Dockerized project: its image's CMD, ports, ... for the probes
                image = image_config(build_stage(client, Path(tmp), f"{tag}-project",
                                                 images.labels("healthy", export="1"),
                                                 target=project_stage.group(1)).attrs)
            build_stage(client, Path(tmp), tag, images.labels("healthy", export="1"))
        self.built += 1
        outcomes = healthy_outcomes(client, tag, test_command) if test_command is not None else {}
        manifest = run_collector(client, tag) | {"healthy_outcomes": outcomes}
        return manifest | {"image": image} if image is not None else manifest


# The stage the healthy stage builds on (for a Dockerized project: the project's own last stage).
HEALTHY_PARENT = re.compile(r"^FROM (\S+) AS healthy$", re.MULTILINE)


def build_stage(client, context: Path, tag: str, image_labels: dict[str, str],
                target: str | None = None):
    """Build a context folder's Dockerfile (up to stage `target`); ExportError with the log tail on failure."""
    from miner.sandbox.base import BuildError

    try:
        return gateway.build_image(client, context=context, tag=tag, image_labels=image_labels, target=target,
                                   what="the healthy environment")
    except BuildError as exc:
        raise ExportError("\n".join([exc.message, *exc.log.splitlines()[-15:]])) from None


def image_env(client, image: str) -> dict[str, str]:
    """The variables an image's containers start with (its Config.Env): the environment before any
    startup file, from which the verifier computes what the environment file makes of it."""
    pairs = client.images.get(image).attrs.get("Config", {}).get("Env") or []
    return dict(item.split("=", 1) for item in pairs if "=" in item)


def run_collector(client, image: str) -> dict:
    """The verifier's --collect output in a fresh, network-less container of `image`, without
    capabilities (as the verifier runs: a file only a capability could read is unreadable to both)."""
    folder = COLLECTOR_DIR.split("/")[-1]
    files = {f"{folder}/{name}": asset(name) for name in VERIFIER_ASSETS}
    files[f"{folder}/base_env.json"] = json.dumps(image_env(client, image)).encode()
    code, out, err = gateway.run_once(client, image, ["bash", "-c", COLLECT], files=files, at="/tmp",
                                      timeout=MANIFEST_TIMEOUT, network_disabled=True, cap_drop=["ALL"],
                                      security_opt=["no-new-privileges:true"],
                                      labels=fork_labels(purpose="export-manifest"))
    if code != 0:
        raise ExportError(f"measuring the healthy environment failed: {err.strip()[-800:]}")
    return json.loads(out.strip().splitlines()[-1])


# -- the verifier's files ---------------------------------------------------------------------------


def healthy_outcomes(client, image: str, test_command: str) -> dict[str, str]:
    """The suite's outcome per test in a fresh, network-less container of the healthy image: the
    image's interpreter and system are not the sandbox's the task was mined in (a patch release of
    Python, a library of the base image), and a P2P test that fails here judges nothing."""
    runner = ecosystems.runner_for(test_command)
    report = "/tmp/miner-healthy.report"
    script = f"cd {PROJECT_DIR}; {runner.suite_command(test_command, report)} >/dev/null 2>&1; cat {report}"
    code, out, err = gateway.run_once(client, image, ["bash", "-c", script], timeout=HEALTHY_SUITE_TIMEOUT,
                                      network_disabled=True, labels=fork_labels(purpose="export-suite"))
    results = runner.parse_report(out) if code == 0 else {}
    if not results:
        raise ExportError(f"the healthy image's test suite gave no report: {(err or out).strip()[-400:]}")
    return {test: result.outcome for test, result in results.items()}


def has_tests(task) -> bool:
    """Whether a task's checks include tests of the suite, not only derived probes."""
    return any(not t.startswith("probe::") for t in [*task.f2p, *task.p2p])


def judged_in_image(ts: TaskSource, manifest: dict) -> TaskSource:
    """The task as the healthy image can judge it: its P2P less the tests that do not pass there
    (they judge nothing); the tests dropped are named in the task's metadata."""
    outcomes: dict[str, str] = manifest.get("healthy_outcomes") or {}
    # F2P tests are kept whatever this run says: the suite here runs without the verifier's setting
    # of the environment (a task's variables, its services), so only P2P tests are dropped.
    failing = [t for t in ts.task.p2p if not t.startswith("probe::") and outcomes.get(t) != "passed"]
    if not failing:
        return ts
    p2p = [t for t in ts.task.p2p if t not in failing]
    if not p2p and len(ts.task.f2p) > 1 and not ts.task.whole_suite:
        raise ExportError(f"none of its P2P tests pass in the healthy image: {', '.join(failing[:3])}")
    task = ts.task.model_copy(update={"p2p": p2p})
    return replace(ts, task=task, dropped=sorted(failing))


def runner_spec(test_command: str) -> dict:
    """How the verifier runs a task's tests: pytest with its arguments, or node's test runner with
    its options (ExportError for any other command)."""
    try:
        return ecosystems.runner_for(test_command).verifier_spec(test_command)
    except ValueError as exc:
        raise ExportError(str(exc)) from None


def project_relative(path: str | None) -> str | None:
    if not path:
        return None
    if path.startswith(PROJECT_DIR + "/"):
        return path[len(PROJECT_DIR) + 1:]
    return None if path.startswith("/") else path.lstrip("./") or None


def _under(rel: str, root: str | None) -> bool:
    return root is not None and (rel == root or rel.startswith(root.rstrip("/") + "/"))


def test_files(ts: TaskSource) -> dict[str, Path]:
    """Project-relative test files the verifier puts back: the test folders, conftests, test modules.

    The break's own target (a test data file, say) is never among them.
    """
    root = ts.project.path
    target = project_relative(ts.task.target.path)
    ids = [t for t in ts.task.f2p + ts.task.p2p if not t.startswith("probe::")]
    test_roots: set[str] = set()
    for test_id in ids:
        parts = PurePosixPath(test_id.split("::")[0]).parts
        cut = next((i for i, p in enumerate(parts[:-1]) if p in TEST_DIR_NAMES), None)
        test_roots.add("/".join(parts[: cut + 1]) if cut is not None else "/".join(parts))
    wanted: dict[str, Path] = {}
    for path in walk(root):
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(root).as_posix()
        name = path.name
        is_test = (
            any(_under(rel, r) for r in test_roots)
            or name == "conftest.py"
            or (rel in ts.task.protected and (name.startswith("test_") or name.endswith("_test.py")))
        )
        if is_test and not _under(rel, target):
            wanted[rel] = path
    return dict(sorted(wanted.items()))


def verifier_spec(ts: TaskSource, originals: dict[str, Path]) -> dict:
    task = ts.task
    return {
        "task_id": task.id,
        "project_dir": PROJECT_DIR,
        "venv_dir": VENV_DIR,
        "env_file": ENV_FILE,
        "f2p": task.f2p,
        "p2p": task.p2p,
        "probes": [p.model_dump() for p in task.probes],
        "protected": dict(sorted(task.protected.items())),
        "originals": {rel: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "mode": p.stat().st_mode & 0o777}
                      for rel, p in originals.items()},
        **runner_spec(task.test_command),
        "timeout": test_timeout(task),
        "target_envvar": task.target.name if task.target.kind == "envvar" else None,
        # interpreter and runner variables the break itself sets: the verifier holds every other one
        # at its healthy value while the tests run, but these must be seen as the solver left them
        "broken_envvars": broken_variables(task.break_script),
        # sources whose cached bytecode the task breaks: the tests never read a cached .pyc (forged
        # bytecode must not run), so the verifier checks the one Python would load
        "bytecode_sources": sorted({t.path for t in (task.target, *(p.target for p in task.parts))
                                    if t.kind == "bytecode" and t.path}),
    }


RUNTIME_VARIABLE = re.compile(r"\b(PYTHON[A-Z]+|PYTEST_[A-Z_]+|LD_[A-Z_]+|BASH_ENV)\b")
EXPORTED = re.compile(r"\bexport\s+([A-Za-z_][A-Za-z0-9_]*)=")


def broken_variables(break_script: str) -> list[str]:
    """The variables a break script may set: the interpreter, loader and test-runner variables it
    names and every `export NAME=` it writes. The verifier requires each back at its healthy value
    after the repair (removed, not satisfied by building what it points at)."""
    return sorted(set(RUNTIME_VARIABLE.findall(break_script)) | set(EXPORTED.findall(break_script)))


BOOT_LINE = ("score --list {tests}/runtime.txt --reward {reward} --python {python} --deadline {deadline}{options} "
             "-- {tests}/verifier.py --reward {reward}")
# Harbor runs tests/test.sh by its interpreter line: the kernel starts the boot tool on it, and no
# shell (which would read $BASH_ENV, a file the agent could write) runs before the verifier.
TEST_SH = """#!{tests}/boot script
# Verifier of miner task {task_id}: writes {reward} (1 = repaired, 0 = not).
# The interpreter line above starts tests/boot (a static program built from miner's boot.c: no file
# of this container runs inside it, and no shell runs before it) on this file, with the options
# of the next line. It stops the harness's shells and every process left behind, checks the
# interpreter and everything it loads against the healthy image (tests/runtime.txt), runs
# tests/verifier.py with it and writes the reward itself, once.
# boot: {boot_line}
# A harness that runs this file with bash instead reaches the same program:
exec {tests}/boot script {tests}/test.sh
echo "verifier: cannot start {tests}/boot: reward 0"{refused}
mkdir -p {reward_dir} && echo 0 > {reward}
"""
# A tests folder whose path is only known when the harness runs (Terminal-Bench 1.0's $TEST_DIR):
# bash starts the boot tool.
TEST_SH_BASH = """#!/bin/bash
# Verifier of miner task {task_id}: writes {reward} (1 = repaired, 0 = not).
# tests/boot (a static program built from miner's boot.c: no file of this container runs inside
# it) kills stray processes, checks the interpreter and everything it loads against the healthy
# image (tests/runtime.txt), runs tests/verifier.py with it and writes the reward itself, once.
shopt -s execfail
exec {tests}/boot {boot_line}
echo "verifier: cannot start {tests}/boot: reward 0"{refused}
mkdir -p {reward_dir} && echo 0 > {reward}
"""


def test_script(ts: TaskSource, manifest: dict, reward: str = "/logs/verifier/reward.txt",
                tests_dir: str = "/tests", options: str = " --kill-ancestors", refused: str = "") -> str:
    """The verifier's entry point: the boot tool runs it (its interpreter line, for a tests folder
    at a fixed path) or bash hands over to it at once. `options` are the boot tool's (see boot.c),
    `refused` lines run when the boot tool cannot start."""
    python = manifest["system_python"]["real"]
    deadline = int(verifier_timeout(ts.task)) - 30  # the harness's own limit comes after
    fixed = tests_dir.startswith("/")
    if fixed and any(c.isspace() for c in python + tests_dir + reward):
        raise ExportError(f"the verifier's paths must hold no spaces (interpreter {python!r})")
    boot_line = BOOT_LINE.format(tests=tests_dir, reward=reward, python=python if fixed else shlex.quote(python),
                                 deadline=deadline, options=options)
    return (TEST_SH if fixed else TEST_SH_BASH).format(
        task_id=ts.task.id, reward=reward, reward_dir=os.path.dirname(reward), tests=tests_dir,
        boot_line=boot_line, refused=refused)


def tests_sums(files: dict[str, bytes]) -> bytes:
    """SHA256SUMS of tests/ (`sha256sum -c` reads it): one "DIGEST  PATH" line per file, sorted."""
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(files.items())).encode()


def verifier_files(ts: TaskSource, manifest: dict, boot: bytes) -> dict[str, bytes]:
    """tests/ without test.sh: the boot tool and its runtime list, the verifier, its guard, probe
    runner, spec, manifest (without the runtime list) and originals."""
    originals = test_files(ts)
    files = {
        BOOT_NAME: boot,
        RUNTIME_NAME: runtime_text(manifest).encode(),
        **{name: asset(name) for name in VERIFIER_FILES},
        "spec.json": json.dumps(verifier_spec(ts, originals), indent=1, sort_keys=True).encode(),
        "manifest.json": json.dumps({k: v for k, v in manifest.items() if k != "runtime"}, indent=1,
                                    sort_keys=True).encode(),
    }
    files |= {f"originals/{rel}": path.read_bytes() for rel, path in originals.items()}
    return files


COMPOSE_OVERRIDE = """\
# miner: the agent and the verifier run like the sandboxes that validated this task did:
# as root but with every capability dropped and no way to gain privileges (so, for one, a
# file with mode 000 is unreadable even to root).{network_note}
services:
  {service}:
    cap_drop:
      - ALL
    security_opt:
      - no-new-privileges:true{network}
"""
OFFLINE_NOTE = """
# The repair needs nothing from the network (its evidence is in the environment): none is given."""


def solver_view_file(ts: TaskSource, manifest: dict) -> dict[str, bytes]:
    """tests/solver_view.json, what `miner check` runs in a solver's shells (miner.solver_view): the
    instruction's command and first error line, and the users whose shells must show them (root and
    a Dockerized project's own user). Empty for a task stored without a solver view."""
    view = ts.task.solver_view
    if view is None:
        return {}
    user = ((manifest.get("image") or {}).get("user") or "root").split(":")[0]
    users = ["root"] + ([user] if user not in ("root", "0") else [])
    data = {"view": view.model_dump(mode="json"), "users": users}
    return {"solver_view.json": json.dumps(data, indent=1, sort_keys=True).encode()}


def compose_override(service: str = "main", offline: bool = False) -> str:
    """The compose file of a task's main service; `offline` cuts its network (a repair from evidence
    inside the environment needs none, and Docker Compose enforces it wherever the file is used)."""
    return COMPOSE_OVERRIDE.format(service=service, network_note=OFFLINE_NOTE if offline else "",
                                   network="\n    network_mode: none" if offline else "")


def instruction(ts: TaskSource) -> str:
    """instruction.md: the task's instruction in the exported variant (symptom: a generic one when
    none was written); ExportError when a task mined before the variants lacks the one asked for."""
    if ts.variant != "symptom":
        text = ts.task.instructions.get(ts.variant, "").strip()
        if not text:
            raise ExportError(f"task {ts.task.id} has no {ts.variant} instruction (it was mined before instruction "
                              "variants existed: mine it again)")
        return text + "\n"
    text = ts.task.instruction.strip() or (
        "The Python project in /sandbox/project no longer passes its test suite: its environment is broken. "
        "Repair the environment so that the tests pass again, without changing the project's source or test files."
    )
    return text + "\n"


def solve_script(task: Task) -> str:
    """solution/solve.sh: the fix script, run the way miner validated it (by bash, which reads the
    environment from ~/.bashrc through BASH_ENV; in the project folder)."""
    return (
        "#!/bin/bash\n"
        f"# Oracle of miner task {task.id}: the validated fix for {task.type_id} on {task.target.key}.\n"
        f"cd {PROJECT_DIR}\n"
        "# --- fix script ---\n"
        + task.fix_script.rstrip("\n") + "\n"
    )


# -- writing folders --------------------------------------------------------------------------------


EXECUTABLE = (".sh",)
EXECUTABLE_NAMES = {BOOT_NAME}  # the harnesses copy tests/ keeping modes; test.sh execs it directly


def write_files(root: Path, files: dict[str, bytes | str]) -> None:
    for rel, data in sorted(files.items()):
        path = root.joinpath(*PurePosixPath(rel).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        path.chmod(0o755 if rel.endswith(EXECUTABLE) or path.name in EXECUTABLE_NAMES else 0o644)


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def place_tree(dest: Path, files: dict[str, bytes | str], overwrite: bool) -> str:
    """Write a task folder atomically: "written", "unchanged", "updated" or "kept" (exists)."""
    wanted = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
    if dest.exists():
        if not overwrite:
            return "kept"
        if dest.is_dir() and read_tree(dest) == wanted:
            return "unchanged"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    write_files(tmp, wanted)
    status = "written"
    if dest.exists():
        old = dest.parent / f".old-{dest.name}-{uuid.uuid4().hex[:8]}"
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
        status = "updated"
    else:
        tmp.rename(dest)
    return status


# -- loading tasks --------------------------------------------------------------------------------


class SourceLoader:
    """Fetches each task's project once (at the mined commit) and builds its BuildSpec."""

    def __init__(self, store, cache: Path) -> None:
        self.store = store
        self.cache = cache
        self.projects: dict[tuple[str, str], tuple[Project, BuildSpec, HealthyState | None]] = {}

    def load(self, task: Task, variant: str = "symptom") -> TaskSource:
        key = (task.repo, task.commit)
        if key not in self.projects:
            self.projects[key] = self._fetch(task)
        project, spec, healthy = self.projects[key]
        dockerized = task.backend == "docker" and (project.path / "Dockerfile").is_file()
        judged = set(task.f2p + task.p2p)
        if not dockerized and any(p.kind in ("command", "http") for p in task.probes if p.id in judged):
            raise ExportError("the task checks an image's CMD or service but its project has no Dockerfile")
        return TaskSource(task=task, project=project, spec=spec, healthy=healthy, name=task_slug(task, variant),
                          dockerized=dockerized, variant=variant)

    def _fetch(self, task: Task) -> tuple[Project, BuildSpec, HealthyState | None]:
        from miner.ecosystems import build_spec
        from miner.sources import FetchError, fetch

        source = task.source
        if source.kind == "git":
            source = source.model_copy(update={"ref": task.commit})
        try:
            project = fetch(source, self.cache / "sources")
        except FetchError as exc:
            raise ExportError(f"cannot fetch {task.repo}: {exc}") from None
        if project.commit != task.commit:
            raise ExportError(f"{task.repo} is now at {project.commit[:12]}, the task was mined at {task.commit[:12]}")
        healthy = self.store.healthy(content_id(task.repo, task.commit, task.source.overrides))
        try:
            spec = build_spec(project, backend="docker")
        except Exception as exc:  # BuildError: an interpreter override the image cannot honour
            raise ExportError(f"no build recipe for {task.repo}: {exc}") from None
        return project, spec, healthy
