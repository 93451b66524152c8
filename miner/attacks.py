"""`miner check --attacks`: known shortcuts run against exported Harbor tasks, each in a fresh container.

The catalogue is data (miner/assets/attacks.yaml, plus any file given with --attack-file): each
shortcut is an id, a class, a description and a bash script run as the agent would run it (root,
with the task's compose options, the rc file /sandbox/home/.bashrc sourced, in the project folder) in a fresh
container of the task's broken image, before tests/test.sh runs as Harbor runs it. A shortcut that
scores above 0 is a hole in the verifier. Each task also gets its baseline (untouched: 0; after
solution/solve.sh: 1), without which its attack results mean nothing.

    catalogue = load_catalogue([])
    reports = attack_tasks([Path("out")], catalogue)
    holes = [(r.name, o.attack.id) for r in reports for o in r.holes]
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from miner.check import CheckError, Checker, Scenario, check_tests_folder, discard, read_config, task_dirs
from miner.sandbox.docker.gateway import read_file, remove_image, tar_files

ATTACK_DIR = "/tmp/miner-attack"
ID = re.compile(r"[a-z0-9][a-z0-9-]*")
REACHES = ("verifier", "harness")
RUNNERS = ("pytest", "node", "tape", "mocha", "jest")  # what a task's verifier runs its tests with (its spec's "runner")
NODE_RUNNERS = ("node", "tape", "mocha", "jest")  # an entry for "node" fits every runner that runs on node
SCRIPT_TIMEOUT = 300


class CatalogueError(Exception):
    """A catalogue file is not usable; the message names the file and the problem."""


@dataclass(frozen=True)
class Attack:
    id: str
    klass: str
    description: str
    script: str
    reach: str = "verifier"  # "harness": through a program the harness itself runs (out of any verifier's reach)
    runner: str | None = None  # only against tasks whose tests this runner runs (spec "runner": pytest, node, tape, mocha, jest)

    def fits(self, runner: str) -> bool:
        return self.runner is None or self.runner == runner or (self.runner == "node" and runner in NODE_RUNNERS)


@dataclass
class Catalogue:
    attacks: list[Attack] = field(default_factory=list)
    payloads: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> {"text": ...} or {"c": ...}

    def select(self, only: list[str]) -> Catalogue:
        """The attacks whose id or class is in `only` (all when empty)."""
        if not only:
            return self
        unknown = set(only) - {a.id for a in self.attacks} - {a.klass for a in self.attacks}
        if unknown:
            raise CatalogueError(f"no shortcut or class named {', '.join(sorted(unknown))} in the catalogue")
        return Catalogue([a for a in self.attacks if a.id in only or a.klass in only], self.payloads)


def _entries(data: object, source: str) -> tuple[list[Attack], dict[str, dict[str, str]]]:
    if not isinstance(data, dict) or not isinstance(data.get("attacks", []), list):
        raise CatalogueError(f"{source}: expected a mapping with an 'attacks' list")
    payloads = data.get("payloads") or {}
    if not isinstance(payloads, dict) or not all(
            isinstance(v, dict) and len(v) == 1 and set(v) <= {"text", "c"} and isinstance(next(iter(v.values())), str)
            for v in payloads.values()):
        raise CatalogueError(f"{source}: each payload needs exactly one of 'text' or 'c' (a string)")
    attacks = []
    for index, entry in enumerate(data.get("attacks") or []):
        where = f"{source}: attack #{index + 1}"
        if not isinstance(entry, dict):
            raise CatalogueError(f"{where} is not a mapping")
        missing = [k for k in ("id", "class", "description", "script") if not isinstance(entry.get(k), str)]
        if missing:
            raise CatalogueError(f"{where} lacks {', '.join(missing)} (strings)")
        if not ID.fullmatch(entry["id"]):
            raise CatalogueError(f"{where}: id {entry['id']!r} must be lowercase letters, digits and dashes")
        reach = entry.get("reach", "verifier")
        if reach not in REACHES:
            raise CatalogueError(f"{where}: reach must be one of {', '.join(REACHES)}, not {reach!r}")
        runner = entry.get("runner")
        if runner not in (None, *RUNNERS):
            raise CatalogueError(f"{where}: runner must be one of {', '.join(RUNNERS)}, not {runner!r}")
        attacks.append(Attack(entry["id"], entry["class"], entry["description"], entry["script"], reach, runner))
    return attacks, payloads


def generated_attacks(data: object, source: str) -> list[Attack]:
    """Every hook point of a catalogue's `generated` section with every payload of its kind: id
    HOOK--PAYLOAD, the hook's class, its script run with the payload's text in $PAYLOAD."""
    section = (data or {}).get("generated") if isinstance(data, dict) else None
    if not section:
        return []
    hooks, payloads = section.get("hooks") or [], section.get("payloads") or {}
    if not isinstance(hooks, list) or not isinstance(payloads, dict):
        raise CatalogueError(f"{source}: generated needs a 'hooks' list and a 'payloads' mapping by kind")
    attacks = []
    for hook in hooks:
        if not isinstance(hook, dict) or not all(isinstance(hook.get(k), str) for k in ("id", "kind", "class", "script")):
            raise CatalogueError(f"{source}: a generated hook needs id, kind, class and script (strings): {hook!r}")
        for payload in payloads.get(hook["kind"]) or []:
            if not isinstance(payload, dict) or not isinstance(payload.get("id"), str) \
                    or not isinstance(payload.get("text"), str):
                raise CatalogueError(f"{source}: a generated payload needs id and text (strings): {payload!r}")
            script = f"PAYLOAD={shlex.quote(payload['text'])}\n{hook['script']}"
            attacks.append(Attack(f"{hook['id']}--{payload['id']}", hook["class"],
                                  f"generated: the {payload['id']} payload through {hook['id']}", script))
    return attacks


def load_catalogue(extra: list[Path], generated: bool = False) -> Catalogue:
    """The built-in catalogue plus the given files; ids must be unique across all of them. With
    `generated`, also every file's generated shortcuts (hook points times payloads)."""
    sources = [("miner/assets/attacks.yaml", resources.files("miner").joinpath("assets", "attacks.yaml").read_text())]
    for path in extra:
        try:
            sources.append((str(path), Path(path).read_text()))
        except OSError as exc:
            raise CatalogueError(f"{path}: cannot read it ({exc.strerror})") from None
    catalogue = Catalogue()
    for source, text in sources:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CatalogueError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
        attacks, payloads = _entries(data, source)
        if generated:
            attacks += generated_attacks(data, source)
        taken = {a.id for a in catalogue.attacks}
        clash = [a.id for a in attacks if a.id in taken]
        if clash:
            raise CatalogueError(f"{source}: shortcut id {clash[0]!r} is already in the catalogue")
        catalogue.attacks += attacks
        catalogue.payloads |= payloads
    return catalogue


def build_payloads(payloads: dict[str, dict[str, str]], folder: Path) -> dict[str, bytes]:
    """The payload files: texts as they are, C sources compiled here into shared libraries (a
    payload that cannot be compiled is left out; the shortcuts using it then fail to apply)."""
    out = {}
    for name, spec in sorted(payloads.items()):
        if "text" in spec:
            out[name] = spec["text"].encode()
            continue
        src, lib = folder / f"{name}.c", folder / name
        src.write_text(spec["c"])
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc and subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], capture_output=True,
                                 timeout=300).returncode == 0:
            out[name] = lib.read_bytes()
    return out


# -- running ------------------------------------------------------------------------------------------


@dataclass
class AttackOutcome:
    attack: Attack
    reward: float | None = None
    applied: int | None = None  # the script's exit code (None: it ran out of time)
    seconds: float = 0.0
    why: str = ""  # the verifier's first reason, or its last line
    log: str = ""  # the script's output when it failed to apply

    @property
    def scored(self) -> bool:
        return self.reward is not None and self.reward > 0


@dataclass
class TaskReport:
    path: Path
    name: str = ""
    nop: Scenario | None = None
    oracle: Scenario | None = None
    outcomes: list[AttackOutcome] = field(default_factory=list)
    error: str = ""

    @property
    def baseline_ok(self) -> bool:
        return (not self.error and self.nop is not None and self.oracle is not None
                and self.nop.reward == 0 and self.oracle.reward == 1)

    @property
    def holes(self) -> list[AttackOutcome]:
        """Shortcuts within the verifier's reach that scored above 0."""
        return [o for o in self.outcomes if o.scored and o.attack.reach == "verifier"]

    @property
    def ok(self) -> bool:
        return self.baseline_ok and not self.holes


def tar_payloads(files: dict[str, bytes]) -> bytes:
    """The attack's script and payloads, executable, under ATTACK_DIR (for put_archive at /)."""
    return tar_files({f"{ATTACK_DIR.strip('/')}/{name}": data for name, data in files.items()}, mode=0o755)


def task_variables(task_dir: Path) -> dict[str, str]:
    """What the scripts are told about the task (from its tests/ folder)."""
    spec = json.loads((task_dir / "tests" / "spec.json").read_text())
    manifest = json.loads((task_dir / "tests" / "manifest.json").read_text())
    files = sorted({t.split("::")[0] for t in spec["f2p"] if not t.startswith("probe::")})
    imports = [p.get("module") for p in spec.get("probes", []) if p.get("kind") == "import" and p.get("module")]
    module = imports[0] if imports else ""
    return {"ATTACK_DIR": ATTACK_DIR, "ATTACK_REWARD": "/logs/verifier/reward.txt",
            "ATTACK_PYTHON": manifest["system_python"]["real"], "ATTACK_F2P_FILES": " ".join(files),
            "ATTACK_MODULE": module or "", "ATTACK_ENV_FILE": spec["env_file"], "ATTACK_PROJECT": spec["project_dir"]}


def task_runner(task_dir: Path) -> str:
    """The runner a task's verifier runs its tests with (tests/spec.json; pytest when unnamed)."""
    try:
        return json.loads((task_dir / "tests" / "spec.json").read_text()).get("runner") or "pytest"
    except (OSError, ValueError):
        return "pytest"


def agent_command(variables: dict[str, str]) -> list[str]:
    """bash running the script as the agent would: the environment file sourced, in the project folder."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(variables.items()))
    return ["bash", "-c", f"source {shlex.quote(variables['ATTACK_ENV_FILE'])} >/dev/null 2>&1; "
                          f"cd {shlex.quote(variables['ATTACK_PROJECT'])}; export {exports}; "
                          f"bash {ATTACK_DIR}/attack.sh > {ATTACK_DIR}/attack.log 2>&1"]


def refusal(result: Scenario) -> str:
    """Why the verifier said no: its first problem, the boot tool's first refusal, or a failing check."""
    rejects = [ln.split("REJECT:", 1)[1].strip() for ln in result.output.splitlines() if "verifier: REJECT:" in ln]
    why = result.problems[0] if result.problems else (rejects[0] if rejects else result.why())
    return why if result.reward is not None else f"no reward written: {why}"


class Attacker:
    """Runs a catalogue's shortcuts against task folders (builds each image once)."""

    def __init__(self, catalogue: Catalogue, checker: Checker | None = None, jobs: int = 1) -> None:
        self.catalogue = catalogue
        self.checker = checker or Checker()
        self.jobs = max(1, jobs)
        with tempfile.TemporaryDirectory(prefix="miner-attack-") as tmp:
            self.payloads = build_payloads(catalogue.payloads, Path(tmp))

    def attack(self, image: str, task_dir: Path, config: dict, attack: Attack, variables: dict[str, str]) \
            -> AttackOutcome:
        outcome = AttackOutcome(attack)
        start = time.monotonic()
        container = self.checker.start(image, task_dir)
        try:
            container.put_archive("/", tar_payloads(self.payloads | {"attack.sh": attack.script.encode()}))
            outcome.applied = self.checker.run(container, agent_command(variables), SCRIPT_TIMEOUT)
            if outcome.applied:
                outcome.log = (read_file(container, f"{ATTACK_DIR}/attack.log") or b"").decode(errors="replace")[-400:]
            container.reload()
            if container.status != "running":
                outcome.why = "the shortcut stopped the container (nothing left to verify)"
                return outcome
            result = self.checker.verify(container, task_dir, config, image)
            outcome.reward = result.reward
            outcome.why = refusal(result)
        finally:
            discard(container)  # gone already when the verifier ran in a clean copy
            outcome.seconds = round(time.monotonic() - start, 2)
        return outcome

    def run_task(self, task_dir: Path, on_outcome: Callable[[TaskReport, AttackOutcome], None] | None = None) \
            -> TaskReport:
        report = TaskReport(path=task_dir)
        try:
            config = read_config(task_dir)
            check_tests_folder(task_dir, config)
            report.name = config["task"]["name"]
            variables = task_variables(task_dir)
            image = self.checker.build(task_dir, config)
        except (CheckError, OSError, ValueError, KeyError) as exc:
            report.error = str(exc) if isinstance(exc, CheckError) else f"not an exported miner task: {exc}"
            return report
        try:
            runner = task_runner(task_dir)
            with ThreadPoolExecutor(max_workers=self.jobs) as pool:  # the baseline's two runs side by side too
                nop = pool.submit(self.checker.scenario, image, task_dir, config, False)
                oracle = pool.submit(self.checker.scenario, image, task_dir, config, True)
                futures = [pool.submit(self.attack, image, task_dir, config, a, variables)
                           for a in self.catalogue.attacks if a.fits(runner)]
                report.nop, report.oracle = nop.result(), oracle.result()
                for future in futures:
                    outcome = future.result()
                    report.outcomes.append(outcome)
                    if on_outcome is not None:
                        on_outcome(report, outcome)
        finally:
            remove_image(self.checker.client, image)
        return report


def attack_tasks(paths: list[Path], catalogue: Catalogue, jobs: int = 1,
                 on_outcome: Callable[[TaskReport, AttackOutcome], None] | None = None,
                 on_task: Callable[[TaskReport], None] | None = None,
                 verifier_mode: str = "separate") -> list[TaskReport]:
    """Every shortcut of the catalogue against every task folder named by `paths` (see check.task_dirs)."""
    attacker = Attacker(catalogue, Checker(verifier_mode=verifier_mode), jobs=jobs)
    reports = []
    for task_dir in task_dirs(paths):
        report = attacker.run_task(task_dir, on_outcome)
        reports.append(report)
        if on_task is not None:
            on_task(report)
    return reports


def report_json(reports: list[TaskReport]) -> dict:
    """The reports as JSON: per task and per shortcut, with totals."""
    def scenario(s: Scenario | None) -> dict | None:
        return None if s is None else {"reward": s.reward, "seconds": s.seconds, "why": s.why()}

    tasks = [{"path": str(r.path), "name": r.name, "error": r.error, "nop": scenario(r.nop),
              "oracle": scenario(r.oracle), "ok": r.ok,
              "attacks": [{"id": o.attack.id, "class": o.attack.klass, "reach": o.attack.reach, "reward": o.reward,
                           "applied": o.applied, "seconds": o.seconds, "why": o.why, "log": o.log} for o in r.outcomes]}
             for r in reports]
    runs = [o for r in reports for o in r.outcomes]
    return {"tasks": tasks, "totals": {
        "tasks": len(reports), "baseline_ok": sum(r.baseline_ok for r in reports), "runs": len(runs),
        "scored": sum(o.scored for o in runs), "holes": sum(len(r.holes) for r in reports),
        "out_of_reach_scored": sum(o.scored and o.attack.reach != "verifier" for o in runs)}}
