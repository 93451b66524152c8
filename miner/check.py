"""Check exported Harbor task folders end to end, in Docker, from their own files only.

For each task folder: the layout is valid (task.toml with [task].name, instruction.md,
environment/Dockerfile, tests/test.sh, solution/solve.sh); environment/ builds; in a fresh
container the verifier scores the untouched (broken) environment 0; in another fresh
container, after solution/solve.sh, it scores 1. This is what `harbor run -a nop` and
`-a oracle` do, without needing Harbor.

The solver's view (tests/solver_view.json, see miner.solver_view): in each of those containers,
before the verifier, the instruction's command runs in a login shell and in `bash -c`, as root and
as the project image's own user: untouched it fails showing the instruction's first error line,
after solution/solve.sh it passes.

The network route is the task's own (rule 8): the untouched run has none, and the oracle has it
only when the task declares its repair needs it (allowed hosts in [metadata], or Harbor's
[environment] network_mode); so oracle 1 shows the repair is possible from the evidence the task
names, offline ones from what the environment holds.

Where the verifier runs (`verifier_mode`): "separate" (the default) verifies in a fresh container
in which no process of the agent's exists. A task exported for Harbor's separate verifier
([verifier] environment_mode = "separate") is checked as Harbor runs it: its collect command runs
in the agent's container, which is then removed, and a fresh container of the task's image gets
/logs/artifacts and tests/ (the boot tool carries the changes in, miner/assets/restore.py). Any
other task is verified in a container of the agent's container committed as an image. "shared"
verifies inside the agent's container, as a harness that only shares does: the boot tool's own
defences then stand alone.

Before anything is built, tests/ must be what the exporter wrote (tests/SHA256SUMS, whose digest
task.toml records), and the verifier's own files must be this miner's: a folder altered since is
refused with the file named, and nothing is scored.

    results = check_tasks([Path("out/task-a"), Path("out/task-b")])
    bad = [r for r in results if not r.ok]
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import yaml

from miner.models import SolverView, content_id
from miner.sandbox.docker.gateway import build_image, read_file, remove_image, tar_files, tar_folder
from miner.solver_view import judge, read_view, view_script

REQUIRED = ("task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh")
VERIFIER_MODES = ("separate", "shared")
ARTIFACTS = "/logs/artifacts"
COLLECT_TIMEOUT = 600
REWARD = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
# Harbor's first verifier step (Verifier._remove_reward_files): when it fails, the trial errors.
CLEAR_COMMAND = ["rm", "-f", "--", REWARD, REWARD_JSON]
VERDICT = "/logs/verifier/verdict.json"
BOOT_REJECT = re.compile(r"^verifier: REJECT: (.+)$", re.MULTILINE)  # boot.c's reasons for not running it
SOLVER_VIEW = "tests/solver_view.json"
VIEW_TIMEOUT = 600
RUNG_TIMEOUT = 900  # a blind repair's script (miner.ladder.SCRIPT_TIMEOUT in the mining sandbox)
STDOUT = "/logs/verifier/test-stdout.txt"
# Harbor's verifier command (harbor.utils.scripts.build_execution_command), run as it runs it.
TEST_COMMAND = f"(/tests/test.sh) > {STDOUT} 2>&1"


@dataclass
class Scenario:
    """One verifier run: its reward (None when none was written) and why."""

    reward: float | None = None
    problems: list[str] = field(default_factory=list)
    failing: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    output: str = ""
    view: list[str] | None = None  # what is wrong with the solver's view ([] when right; None: not run)

    def why(self) -> str:
        if self.problems:
            return self.problems[0]
        if self.failing:
            test_id, outcome = next(iter(self.failing.items()))
            more = f" (+{len(self.failing) - 1} more)" if len(self.failing) > 1 else ""
            return f"{test_id}: {outcome}{more}"
        return self.output.strip().splitlines()[-1] if self.output.strip() else "no reward written"


@dataclass
class CheckResult:
    path: Path
    name: str = ""
    build_seconds: float = 0.0
    nop: Scenario | None = None
    oracle: Scenario | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return (not self.error and self.nop is not None and self.oracle is not None
                and self.nop.reward == 0 and self.oracle.reward == 1 and self.nop.view == []
                and self.oracle.view == [])

    @property
    def reason(self) -> str:
        if self.error:
            return self.error
        if self.nop is None or self.oracle is None:
            return "not run"
        if self.nop.reward != 0:
            return f"without the fix the verifier scored {self.nop.reward}: the break does not fail any check"
        if self.oracle.reward != 1:
            return f"after solution/solve.sh the verifier scored {self.oracle.reward}: {self.oracle.why()}"
        if self.nop.view:
            return f"solver's view, untouched: {self.nop.view[0]}"
        if self.oracle.view:
            return f"solver's view, after solution/solve.sh: {self.oracle.view[0]}"
        return ""


@dataclass
class LadderResult:
    """The blind-repair ladder on one exported task (`miner check --ladder`)."""

    path: Path
    name: str = ""
    label: str = ""  # the first rung the verifier scores 1 after, or needs-diagnosis
    mined: str = ""  # the label measured where the task was mined (task.toml's blind_repair; "" unmeasured)
    rewards: dict[str, float | None] = field(default_factory=dict)  # by rung tried
    error: str = ""


class CheckError(Exception):
    """A task folder cannot be checked (layout, build); the message says why."""


def read_config(task_dir: Path) -> dict:
    missing = [p for p in REQUIRED if not (task_dir / p).is_file()]
    if missing:
        raise CheckError(f"not a Harbor task folder: missing {', '.join(missing)}")
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text())
    except tomllib.TOMLDecodeError as exc:
        raise CheckError(f"task.toml does not parse: {exc}") from None
    if not config.get("task", {}).get("name"):
        raise CheckError("task.toml has no [task].name")
    return config


def read_solver_view(task_dir: Path) -> tuple[SolverView, list[str]]:
    """The task's solver view and the users whose shells show it (tests/solver_view.json)."""
    path = task_dir / SOLVER_VIEW
    if not path.is_file():
        raise CheckError(f"no {SOLVER_VIEW}: exported without the solver's view (export it again)")
    try:
        data = json.loads(path.read_text())
        return SolverView.model_validate(data["view"]), list(data.get("users") or ["root"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckError(f"{SOLVER_VIEW} is not valid: {exc}") from None


def separate_verifier(config: dict) -> bool:
    """Whether the task declares Harbor's separate verifier environment."""
    verifier = config.get("verifier", {})
    return verifier.get("environment_mode") == "separate" or "environment" in verifier


def repair_network(config: dict) -> bool:
    """Whether the task declares that its repair needs the network: Harbor's own policy when set
    (public, or an allowlist), else miner's [metadata] (allowed hosts; a task without evidence,
    exported before rule 8, keeps the network it always had)."""
    mode = config.get("environment", {}).get("network_mode")
    if mode is not None:
        return mode != "no-network"
    metadata = config.get("metadata", {})
    return bool(metadata.get("allowed_hosts")) or not metadata.get("evidence_kinds")


def container_options(task_dir: Path) -> dict:
    """cap_drop and security_opt of the task's compose override for its main service (as Harbor
    applies; the network is the route's, see repair_network)."""
    path = task_dir / "environment" / "docker-compose.yaml"
    if not path.is_file():
        return {}
    main = (yaml.safe_load(path.read_text()) or {}).get("services", {}).get("main", {}) or {}
    return {key: list(main[key]) for key in ("cap_drop", "cap_add", "security_opt") if main.get(key)}


def discard(container) -> None:  # noqa: ANN001 - a docker Container
    """Remove a container, gone already or not."""
    import docker.errors

    from miner.sandbox.docker.container import REGISTRY

    REGISTRY.discard(container.id)
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass


def parse_reward(raw: bytes | None) -> float | None:
    """A reward file's value as Harbor reads it (None when missing, empty or not a number)."""
    try:
        return float(raw.decode().strip()) if raw and raw.strip() else None
    except (UnicodeDecodeError, ValueError):
        return None


class Checker:
    """Builds task images and runs the nop and oracle scenarios in fresh containers."""

    def __init__(self, client=None, keep_images: bool = False, defer_removal: bool = False,  # noqa: ANN001
                 verifier_mode: str = "separate", rebuild: bool = False) -> None:
        from miner.sandbox.docker.container import prune_stale
        from miner.sandbox.docker.images import docker_client

        if verifier_mode not in VERIFIER_MODES:
            raise ValueError(f"verifier mode must be one of {', '.join(VERIFIER_MODES)}, not {verifier_mode!r}")
        self.verifier_mode = verifier_mode
        self.client = client or docker_client()
        prune_stale(self.client)  # check containers a killed run left
        self.keep_images = keep_images
        # Builds running side by side share cached layers: removing one task's image then would
        # delete a parent another build is using. With defer_removal, remove_built() does it at the end.
        self.defer_removal = defer_removal
        self.rebuild = rebuild  # every build step runs again (no cached layer): what changed outside shows
        self.built: list[str] = []

    def remove_built(self) -> None:
        for image in self.built:
            remove_image(self.client, image)
        self.built.clear()

    def build(self, task_dir: Path, config: dict) -> str:
        """The task's environment/ built, within the build time its task.toml gives (20 min when none)."""
        from miner.sandbox.base import BuildError
        from miner.sandbox.docker.images import labels

        tag = f"miner/check:{content_id(str(task_dir.resolve()), length=12)}"
        timeout = float(config.get("environment", {}).get("build_timeout_sec") or 1200)
        try:
            image = build_image(self.client, context=task_dir / "environment", tag=tag, timeout=timeout,
                                image_labels=labels("broken", check="1"), what="environment/", nocache=self.rebuild)
        except BuildError as exc:
            raise CheckError(f"environment/ does not build: {exc}") from None
        return image.id

    def start(self, image: str, task_dir: Path, network: bool = False):  # noqa: ANN201 - a docker Container
        """A fresh container of the task's image, kept alive and confined as Harbor runs it, with
        the network only when asked (the default bridge) and none otherwise."""
        from miner.sandbox.docker.container import REGISTRY, fork_labels

        route = {} if network else {"network_mode": "none"}
        container = self.client.containers.run(image, ["sh", "-c", "sleep infinity"], detach=True,
                                               labels=fork_labels(purpose="check"), **container_options(task_dir),
                                               **route)
        REGISTRY.add(self.client, container.id)  # removed on exit or SIGTERM; a killed run's by prune_stale
        container.exec_run(["mkdir", "-p", "/logs/verifier", "/logs/agent"])
        return container

    def run(self, container, argv: list[str], limit: float) -> int | None:  # noqa: ANN001
        """Run argv in the container (as `docker exec` does) for at most `limit` seconds: its exit
        code, or None when it ran out of time (the container is then stopped). The deadline is kept
        here, not by a program of the container's, which the agent could have replaced."""
        exec_id = self.client.api.exec_create(container.id, argv)["Id"]
        self.client.api.exec_start(exec_id, detach=True)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            info = self.client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info.get("ExitCode")
            time.sleep(0.3)
        container.kill()
        return None

    def solve(self, container, task_dir: Path, config: dict) -> str:  # noqa: ANN001
        """Run solution/solve.sh as the oracle agent does; returns a note when it failed."""
        container.put_archive("/", tar_folder(task_dir / "solution", "solution"))
        agent = float(config.get("agent", {}).get("timeout_sec") or 900)
        code = self.run(container, ["bash", "-c", "bash /solution/solve.sh > /tmp/miner-solve.log 2>&1"], agent)
        if code == 0:
            return ""
        log = (read_file(container, "/tmp/miner-solve.log") or b"").decode(errors="replace")
        return f"solve.sh {'ran out of time' if code is None else f'exited {code}'}: {log[-400:]}\n"

    def verify(self, container, task_dir: Path, config: dict, image: str) -> Scenario:  # noqa: ANN001
        """Run the verifier on the agent's container `container` (of the task image `image`) in the
        checker's verifier mode (see the module's docstring)."""
        if self.verifier_mode == "shared":
            return self.verify_in(container, task_dir, config)
        start = time.monotonic()
        fresh, snapshot = self.clean_copy(container, task_dir, config, image)
        try:
            result = self.verify_in(fresh, task_dir, config)
        finally:
            discard(fresh)
            if snapshot:
                self.client.images.remove(snapshot, force=True)
        result.seconds = round(time.monotonic() - start, 2)
        return result

    def clean_copy(self, container, task_dir: Path, config: dict, image: str):  # noqa: ANN001, ANN201
        """A fresh container holding the agent's state and none of its processes, and the snapshot
        image made for it (None when it is the task's own image); the agent's container is gone."""
        if separate_verifier(config):  # as Harbor: collect, stop the agent, carry /logs/artifacts over
            for hook in config.get("verifier", {}).get("collect", []):
                limit = float(hook.get("timeout_sec") or COLLECT_TIMEOUT)
                self.run(container, ["bash", "-c", hook["command"]], limit)
            try:
                stream, _ = container.get_archive(ARTIFACTS)
                artifacts = b"".join(stream)
            except Exception:  # noqa: BLE001 - docker.errors.NotFound: nothing was collected
                artifacts = b""
            discard(container)
            fresh = self.start(image, task_dir)
            if artifacts:
                fresh.put_archive("/logs", artifacts)
            return fresh, None
        snapshot = container.commit(changes=["LABEL miner.purpose=check-snapshot"]).id
        discard(container)
        return self.start(snapshot, task_dir), snapshot

    def verify_in(self, container, task_dir: Path, config: dict) -> Scenario:  # noqa: ANN001
        """Upload tests/ and run tests/test.sh as Harbor's verifier does; read the reward and verdict."""
        result = Scenario()
        start = time.monotonic()
        if self.run(container, CLEAR_COMMAND, 60) != 0:  # as Harbor: the trial stops with an error, no reward
            result.problems = ["the harness could not remove the old reward files: the trial ends in an error, "
                               "with no reward"]
            return result
        container.put_archive("/", tar_folder(task_dir / "tests", "tests"))
        limit = float(config.get("verifier", {}).get("timeout_sec") or 600)
        code = self.run(container, ["bash", "-c", TEST_COMMAND], limit)
        result.output = (read_file(container, STDOUT) or b"").decode(errors="replace")
        if code is None:
            result.output += f"\n(the verifier ran out of its {limit:.0f} s: the container was stopped)\n"
        result.reward = parse_reward(read_file(container, REWARD))
        verdict = read_file(container, VERDICT)
        if verdict:
            data = json.loads(verdict)
            result.problems = list(data.get("problems", []))
            result.failing = {k: v for k, v in data.get("outcomes", {}).items() if v != "passed"}
        else:  # no verdict: the boot tool refused to run the verifier, and said why
            result.problems = BOOT_REJECT.findall(result.output)
        result.seconds = round(time.monotonic() - start, 2)
        return result

    def solver_view(self, container, view: SolverView, users: list[str], fixed: bool) -> list[str]:  # noqa: ANN001
        """The instruction's command in a login shell and `bash -c`, as each user: what is wrong ([] if nothing)."""
        problems = []
        for user in users:
            _, out = container.exec_run(["bash", "-c", view_script(view.command, VIEW_TIMEOUT)], user=user)
            problems += judge(view, read_view(out.decode("utf-8", "replace")), fixed)
        return problems

    def scenario(self, image: str, task_dir: Path, config: dict, with_solution: bool) -> Scenario:
        """A fresh container: optionally solve.sh (as the oracle agent), the solver's view, then tests/test.sh;
        with the network only for the oracle of a task whose repair needs it."""
        start = time.monotonic()
        view, users = read_solver_view(task_dir)
        container = self.start(image, task_dir, network=with_solution and repair_network(config))
        try:
            note = self.solve(container, task_dir, config) if with_solution else ""
            seen = self.solver_view(container, view, users, fixed=with_solution)
            result = self.verify(container, task_dir, config, image)
            result.view = seen
            result.output = note + result.output
        finally:
            discard(container)
        result.seconds = round(time.monotonic() - start, 2)
        return result

    def check(self, task_dir: Path) -> CheckResult:
        result = CheckResult(path=task_dir)
        try:
            config = read_config(task_dir)
            result.name = config["task"]["name"]
            read_solver_view(task_dir)  # before the build: a task without one is named at once
            check_tests_folder(task_dir, config)
            start = time.monotonic()
            image = self.build(task_dir, config)
            result.build_seconds = round(time.monotonic() - start, 2)
            try:
                result.nop = self.scenario(image, task_dir, config, with_solution=False)
                result.oracle = self.scenario(image, task_dir, config, with_solution=True)
            finally:
                self.release(image)
        except CheckError as exc:
            result.error = str(exc)
        return result

    def release(self, image: str) -> None:
        """Done with a task's image: removed now, at the end (defer_removal) or never (keep_images)."""
        if not self.keep_images and self.defer_removal:
            self.built.append(image)  # removed at the end: another build may use its parent
        elif not self.keep_images:
            self.client.images.remove(image, force=True)

    def blind_repair(self, image: str, task_dir: Path, config: dict, script: str, network: bool) -> Scenario:
        """A fresh container of the task's image, a task-blind repair script run in it as the agent
        (instead of solve.sh), then the verifier as the task declares it."""
        container = self.start(image, task_dir, network=network)
        try:
            container.put_archive("/tmp", tar_files({"miner-rung.sh": script.encode()}))
            self.run(container, ["bash", "-c", "bash /tmp/miner-rung.sh > /tmp/miner-rung.log 2>&1"], RUNG_TIMEOUT)
            return self.verify(container, task_dir, config, image)
        finally:
            discard(container)

    def ladder(self, task_dir: Path, rungs: list) -> LadderResult:  # list[miner.ladder.Rung]
        """The exported task's measured difficulty: the first rung whose repair the verifier scores 1."""
        from miner.ladder import NEEDS_DIAGNOSIS

        result = LadderResult(path=task_dir)
        try:
            config = read_config(task_dir)
            result.name = config["task"]["name"]
            result.mined = config.get("metadata", {}).get("blind_repair", "")
            check_tests_folder(task_dir, config)
            image = self.build(task_dir, config)
            try:
                result.label = NEEDS_DIAGNOSIS
                for rung in rungs:
                    # the network only where the agent has it too: a rung that needs it and a task that keeps it
                    scored = self.blind_repair(image, task_dir, config, rung.script,
                                               rung.network and repair_network(config))
                    result.rewards[rung.id] = scored.reward
                    if scored.reward == 1:
                        result.label = rung.id
                        break
            finally:
                self.release(image)
        except CheckError as exc:
            result.error = str(exc)
        return result


def task_dirs(paths: list[Path]) -> list[Path]:
    """The task folders named: a task folder itself, or every task folder directly inside a folder."""
    found: list[Path] = []
    for path in paths:
        if (path / "task.toml").is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.iterdir() if (p / "task.toml").is_file())
        else:
            found.append(path)  # reported as not a task folder
    return found


def check_tests_folder(task_dir: Path, config: dict) -> None:
    """CheckError naming the first file of tests/ that differs from what the exporter wrote (its
    SHA256SUMS, whose digest task.toml holds), and any verifier file that is not this miner's."""
    from miner.export.common import TESTS_DIGEST_KEY, VERIFIER_FILES, asset, tests_sums

    tests = task_dir / "tests"
    recorded = config.get("metadata", {}).get(TESTS_DIGEST_KEY)
    sums_path = tests / "SHA256SUMS"
    if not recorded or not sums_path.is_file():
        raise CheckError("tests/ carries no SHA256SUMS recorded in task.toml: exported by an older miner (export "
                         "it again)")
    sums = sums_path.read_bytes()
    if hashlib.sha256(sums).hexdigest() != recorded:
        raise CheckError("tests/SHA256SUMS was altered since the export (its digest is not task.toml's): "
                         "nothing is scored")
    files = {p.relative_to(tests).as_posix(): p.read_bytes() for p in sorted(tests.rglob("*"))
             if p.is_file() and p.name != "SHA256SUMS"}
    expected = dict(line.split("  ", 1)[::-1] for line in sums.decode().splitlines() if "  " in line)
    now = dict(line.split("  ", 1)[::-1] for line in tests_sums(files).decode().splitlines())
    for name in sorted(set(expected) | set(now)):
        if expected.get(name) != now.get(name):
            what = "was removed" if name not in now else "was added" if name not in expected else "was altered"
            raise CheckError(f"tests/{name} {what} since the export: nothing is scored")
    for name in VERIFIER_FILES:
        if name in files and files[name] != asset(name):
            raise CheckError(f"tests/{name} is not this miner's verifier file (altered, or exported by another "
                             "version: export it again): nothing is scored")


R = TypeVar("R")


def each_task(paths: list[Path], work: Callable[[Checker, Path], R], on_result: Callable[[R], None] | None,
              checker: Checker, jobs: int) -> list[R]:
    """`work` on every task folder named by `paths` (see task_dirs), `jobs` at a time; results in their order."""
    from miner.sandbox.docker.container import install_sigterm

    install_sigterm()  # here, in the main thread: the containers start in the pool's threads

    def one(task_dir: Path) -> R:
        result = work(checker, task_dir)
        if on_result is not None:
            on_result(result)
        return result

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(one, task_dirs(paths)))
    finally:
        checker.remove_built()


def check_tasks(paths: list[Path], on_result: Callable[[CheckResult], None] | None = None,
                client=None, jobs: int = 1, verifier_mode: str = "separate",  # noqa: ANN001
                rebuild: bool = False) -> list[CheckResult]:
    """Check every task folder named by `paths` (see task_dirs), `jobs` at a time; results in their
    order. `rebuild`: no build step comes from Docker's cache."""
    checker = Checker(client, defer_removal=jobs > 1, verifier_mode=verifier_mode, rebuild=rebuild)
    return each_task(paths, Checker.check, on_result, checker, jobs)


def ladder_tasks(paths: list[Path], on_result: Callable[[LadderResult], None] | None = None,
                 client=None, jobs: int = 1) -> list[LadderResult]:  # noqa: ANN001
    """The blind-repair ladder (miner.ladder's rungs, weakest first) on every exported task named by
    `paths`, each rung in a fresh container of the task's image, scored by the task's own verifier."""
    from miner.ladder import load_ladder

    rungs = load_ladder()
    checker = Checker(client, defer_removal=jobs > 1)
    return each_task(paths, lambda c, task_dir: c.ladder(task_dir, rungs), on_result, checker, jobs)
