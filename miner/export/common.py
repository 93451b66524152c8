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
      build/              build.sh, install.sh, env.sh, constraints.txt (removed after the build)
      break.sh
      host-ca.crt         the host's CA bundle, when pip needs it to reach the index
    tests/                test.sh and verifier.py (see miner/assets/verifier.py), the guard,
                          probe.py, spec.json, manifest.json and originals/ (the test files)

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
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from miner import __version__
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
from miner.sandbox.docker import images, layout

DEFAULT_BASE_IMAGE = images.BOOTSTRAP_TAG  # the image `miner images bootstrap` builds
DEFAULT_ORG = "miner"
CATEGORY = "environment-repair"
BUILD_TOOLS = {"pip", "setuptools", "wheel", "distribute"}  # never pinned: build isolation needs new ones
TEST_DIR_NAMES = {"test", "tests", "testing"}
PYTEST_LAUNCHERS = ({"python", "python3"}, {"pytest", "py.test"})
MANIFEST_TIMEOUT = 600


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
    variant: str = "symptom"  # which instruction the tasks carry (models.INSTRUCTION_VARIANTS)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9._-]*", self.org) or ".." in self.org:
            raise ValueError(f"--org must look like a package owner (letters, digits, . _ -), not {self.org!r}")
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


def dockerfile(ts: TaskSource, base_image: str, pip: PipForwarding, prefix: str = "",
               tools_stage: str = "") -> str:
    """The task's whole Dockerfile: the healthy stage (see healthy_stage), then the break layer."""
    header = (f"# miner task {ts.task.id}: {ts.task.type_id} on {ts.task.target.key}\n"
              f"# project {ts.task.repo} at {ts.task.commit} (exported by miner {__version__})\n")
    breaking = layout.break_dockerfile("healthy", "break.sh", context_dir=prefix)
    stage = healthy_stage(ts, base_image, pip, prefix, tools_stage)
    return header + stage + "\n" + breaking + final_lines(ts)


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


def asset(name: str) -> bytes:
    return resources.files("miner").joinpath("assets", name).read_bytes()


COLLECT = (
    f"source {ENV_FILE} >/dev/null 2>&1; cd {PROJECT_DIR}; "
    "for py in /usr/bin/python3 /usr/local/bin/python3; do "
    '[ -x "$py" ] && exec "$py" -I -S /tmp/miner-verifier.py --collect; done; '
    "echo 'no system python3 in the image' >&2; exit 3"
)


class ManifestCache:
    """Healthy manifests by build-context hash: memory, then disk, then a build in Docker."""

    def __init__(self, folder: Path, client=None) -> None:
        self.folder = Path(folder)
        self.client = client
        self.memory: dict[str, dict] = {}
        self.built = 0

    def get(self, stage: str, files: dict[str, bytes]) -> dict:
        context = {k: v for k, v in files.items() if k != "break.sh"}
        build = content_id(stage, {k: hashlib.sha256(v).hexdigest() for k, v in sorted(context.items())}, length=24)
        key = content_id(build, hashlib.sha256(asset("verifier.py")).hexdigest(), length=24)
        if key in self.memory:
            return self.memory[key]
        path = self.folder / f"{key}.json"
        if path.is_file():
            self.memory[key] = json.loads(path.read_text())
            return self.memory[key]
        manifest = self._measure(build, stage, context)
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

    def _measure(self, key: str, stage: str, context: dict[str, bytes]) -> dict:
        """Build the healthy stage (tagged by its inputs: a rebuild reuses the tag and Docker's layer
        cache, which later builds of the task's own Dockerfile share) and run --collect inside it."""
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
        manifest = run_collector(client, tag)
        return manifest | {"image": image} if image is not None else manifest


# The stage the healthy stage builds on (for a Dockerized project: the project's own last stage).
HEALTHY_PARENT = re.compile(r"^FROM (\S+) AS healthy$", re.MULTILINE)


def build_stage(client, context: Path, tag: str, image_labels: dict[str, str],
                target: str | None = None):
    """Build a context folder's Dockerfile (up to stage `target`); ExportError with the log tail on failure."""
    import docker.errors

    try:
        image, _ = client.images.build(path=str(context), tag=tag, rm=True, forcerm=True, pull=False,
                                       labels=image_labels, target=target)
        return image
    except docker.errors.BuildError as exc:
        lines = [c.get("stream", "") or c.get("error", "") for c in exc.build_log]
        tail = "".join(lines).strip().splitlines()[-15:]
        raise ExportError(f"the healthy environment does not build: {exc.msg}\n" + "\n".join(tail)) from None
    except docker.errors.APIError as exc:
        raise ExportError(f"the healthy environment does not build: {exc.explanation or exc}") from None


def run_collector(client, image: str) -> dict:
    """The verifier's --collect output in a fresh, network-less container of `image`."""
    container = client.containers.create(image, ["bash", "-c", COLLECT], network_disabled=True,
                                          labels=images.labels("fork", purpose="export-manifest"))
    try:
        container.put_archive("/tmp", images.tar_one("miner-verifier.py", asset("verifier.py")))
        container.start()
        status = container.wait(timeout=MANIFEST_TIMEOUT)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        if status.get("StatusCode") != 0:
            raise ExportError(f"measuring the healthy environment failed: {err.strip()[-800:]}")
        return json.loads(out.strip().splitlines()[-1])
    finally:
        container.remove(force=True)


# -- the verifier's files ---------------------------------------------------------------------------


def pytest_args(test_command: str) -> list[str]:
    """The pytest arguments of a task's test command (`python -m pytest ARGS` or `pytest ARGS`)."""
    try:
        argv = shlex.split(test_command or "python -m pytest")
    except ValueError as exc:
        raise ExportError(f"test command {test_command!r} cannot be parsed: {exc}") from None
    python, pytest = PYTEST_LAUNCHERS
    launcher = argv[0] if argv else ""
    if len(argv) >= 3 and (os.path.basename(launcher) in python or launcher == "$MINER_PYTHON") \
            and argv[1:3] == ["-m", "pytest"]:
        return argv[3:]
    if argv and os.path.basename(argv[0]) in pytest:
        return argv[1:]
    raise ExportError(f"test command {test_command!r} is not a plain pytest invocation the verifier can guard")


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
        "pytest_args": pytest_args(task.test_command),
        "timeout": test_timeout(task),
        "target_envvar": task.target.name if task.target.kind == "envvar" else None,
    }


TEST_SH = """#!/bin/bash
# Verifier of miner task {task_id}: writes {reward} (1 = repaired, 0 = not).
# All checks live in verifier.py, run by the system interpreter in isolated mode; this wrapper
# only makes sure that interpreter is the healthy one. Any error leaves the reward at 0.
mkdir -p {reward_dir}
rm -rf {reward_dir}/reward.json {reward}
echo 0 > {reward}
PY={python}
want={sha}
have=$(sha256sum "$(readlink -f "$PY")" 2>/dev/null | cut -d' ' -f1)
if [ "$have" != "$want" ]; then
    echo "verifier: $PY is missing or is not the healthy interpreter: reward 0"{refused}
else
    "$PY" -I -S {tests}/verifier.py --reward {reward}{extra}
fi
"""


def test_script(ts: TaskSource, manifest: dict, reward: str = "/logs/verifier/reward.txt",
                tests_dir: str = "/tests", extra: str = "", refused: str = "") -> str:
    """The verifier's shell entry point; `extra` is appended to verifier.py's arguments and
    `refused` (lines) runs when the interpreter is not the healthy one."""
    system = manifest["system_python"]
    return TEST_SH.format(task_id=ts.task.id, reward=reward, reward_dir=os.path.dirname(reward),
                          python=shlex.quote(system["path"]), sha=system["sha256"], tests=tests_dir, extra=extra,
                          refused=refused)


def verifier_files(ts: TaskSource, manifest: dict) -> dict[str, bytes]:
    """tests/ without test.sh: the verifier, its guard, probe runner, spec, manifest and originals."""
    originals = test_files(ts)
    files = {
        "verifier.py": asset("verifier.py"),
        "verifier_pytest.py": asset("verifier_pytest.py"),
        "probe.py": asset("probe.py"),
        "spec.json": json.dumps(verifier_spec(ts, originals), indent=1, sort_keys=True).encode(),
        "manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode(),
    }
    files |= {f"originals/{rel}": path.read_bytes() for rel, path in originals.items()}
    return files


COMPOSE_OVERRIDE = """\
# miner: the agent and the verifier run like the sandboxes that validated this task did:
# as root but with every capability dropped and no way to gain privileges (so, for one, a
# file with mode 000 is unreadable even to root).
services:
  {service}:
    cap_drop:
      - ALL
    security_opt:
      - no-new-privileges:true
"""


def compose_override(service: str = "main") -> str:
    return COMPOSE_OVERRIDE.format(service=service)


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
    """solution/solve.sh: the fix script, run the way miner validated it (env file, project folder)."""
    return (
        "#!/bin/bash\n"
        f"# Oracle of miner task {task.id}: the validated fix for {task.type_id} on {task.target.key}.\n"
        f"source {ENV_FILE}\ncd {PROJECT_DIR}\n"
        "# --- fix script ---\n"
        + task.fix_script.rstrip("\n") + "\n"
    )


# -- writing folders --------------------------------------------------------------------------------


EXECUTABLE = (".sh",)


def write_files(root: Path, files: dict[str, bytes | str]) -> None:
    for rel, data in sorted(files.items()):
        path = root.joinpath(*PurePosixPath(rel).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        path.chmod(0o755 if rel.endswith(EXECUTABLE) else 0o644)


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
        from miner.install import build_spec
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
