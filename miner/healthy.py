"""Healthy state: measure how an untouched project behaves, so breaks can be judged against it.

Runs the test suite twice (flaky tests are excluded), records installed distributions, a hash
manifest of the project's files, the environment, and derived probes (`import pkg`, each console
script's `--help`). Probes are tests like the others: they get ids and outcomes in every state.
`run_checks` is the one way every later stage (validate, replay) measures a sandbox.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

from miner import ecosystems
from miner.ecosystems.base import InventoryError, ManifestError
from miner.models import (
    PROJECT_DIR,
    HealthyState,
    Outcome,
    Probe,
    Project,
    SuiteRun,
    TestResult,
)
from miner.projectfiles import is_protected, project_files, test_file_of
from miner.sandbox.base import Backend, BuildSpec, Healthy, Sandbox, word_chunks
from miner.testing import command_of, run_suite_then
from miner.timing import Clock, timed

MINER_DIR = "/sandbox/.miner"


class SkipProject(Exception):
    """The project cannot be mined; the message is the reason recorded and shown."""


def asset(name: str) -> bytes:
    """Bytes of a standalone helper script shipped in miner/assets."""
    return resources.files("miner").joinpath("assets", name).read_bytes()


RAW_KINDS = ("import", "script")  # probes run by probe.py inside any sandbox


def run_raw_probes(sandbox: Sandbox, probes: list[Probe]) -> dict[str, dict]:
    """Raw exit codes and digests of import/script probes."""
    script = probe_script(probes)
    if not script:
        return {}
    return parse_probe_output(sandbox.run(script, timeout=600).output)


# The probes' own wall time, printed after their results (the clock counts it as "probes" even
# when they run in the same command as the suite).
_PROBE_NS = "::miner-probes-ns::"


def probe_script(probes: list[Probe]) -> str:
    """One shell command that writes probe.py and the probes and runs them with the system
    interpreter when there is one (a break may hit the venv's), else the venv's; "" for no probes."""
    simple = [p.model_dump() for p in probes if p.kind in RAW_KINDS]
    if not simple:
        return ""
    files = {f"{MINER_DIR}/probe.py": asset("probe.py"), f"{MINER_DIR}/probes.json": json.dumps(simple).encode()}
    writes = "; ".join(f"echo {base64.b64encode(data).decode()} | base64 -d > {path}" for path, data in files.items())
    return (f"miner_ns=$(date +%s%N); mkdir -p {MINER_DIR}; {writes}; miner_py=/usr/bin/python3; "
            f'[ -x "$miner_py" ] || miner_py="$MINER_PYTHON"; '
            f'"$miner_py" -I {MINER_DIR}/probe.py {MINER_DIR}/probes.json; '
            f'echo; echo {_PROBE_NS} $(( $(date +%s%N) - miner_ns ))')


def parse_probe_output(output: str) -> dict[str, dict]:
    """The raw results probe_script printed ({} when it printed none)."""
    lines = [line for line in output.strip().splitlines() if line.strip() and not line.startswith(_PROBE_NS)]
    try:
        found = json.loads(lines[-1])
    except (ValueError, IndexError):
        return {}
    return found if isinstance(found, dict) else {}


def probe_seconds(output: str) -> float:
    """The probes' wall time probe_script printed (0 when it did not)."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith(_PROBE_NS):
            try:
                return int(line.split()[-1]) / 1e9
            except ValueError:
                return 0.0
    return 0.0


def suite_and_probes(sandbox: Sandbox, command: str, probes: list[Probe], tests: list[str] | None = None,
                     timeout: float | None = None, deselect: list[str] = (),
                     clock: Clock | None = None) -> tuple[SuiteRun, dict[str, dict]]:
    """The suite (or `tests`, or all but `deselect`) and the raw results of the import/script
    probes among `probes`, in one command (the probes on their own when the suite timed out)."""
    script = probe_script(probes)
    if tests is not None and not tests:
        suite, after = SuiteRun(command=command, exit_code=0, duration=0.0), None
    else:
        suite, after = run_suite_then(sandbox, command, tests=tests, timeout=timeout, deselect=deselect, then=script)
    if not script:
        return suite, {}
    if after is None:
        with timed(clock, "probes"):
            return suite, run_raw_probes(sandbox, probes)
    if clock is not None:
        clock.share("probes", probe_seconds(after))
    return suite, parse_probe_output(after)


def judge_probes(probes: list[Probe], raw: dict[str, dict]) -> dict[str, TestResult]:
    """A probe passes when it behaves exactly as it did healthy (exit code and output digest)."""
    results = {}
    for probe in probes:
        if probe.kind not in RAW_KINDS:
            continue  # a backend's derived probes (command, http) are judged by the backend
        got = raw.get(probe.id)
        if got is None:
            results[probe.id] = TestResult(id=probe.id, outcome="missing")
            continue
        same = got["exit"] == probe.expected_exit and got["digest"] == probe.expected_digest
        message = "" if same else f"exit {got['exit']} (healthy: {probe.expected_exit})\n{got.get('head', '')}"
        results[probe.id] = TestResult(id=probe.id, outcome="passed" if same else "failed", message=message)
    return results


ExtraProbes = Callable[[Sandbox, list[Probe]], dict[str, TestResult]]


def run_checks(sandbox: Sandbox, command: str, probes: list[Probe], tests: list[str] | None = None,
               timeout: float | None = None, extra: ExtraProbes | None = None, clock: Clock | None = None,
               deselect: list[str] = ()) -> SuiteRun:
    """Run the test suite (or the given test ids, or all but the `deselect`ed ones) plus the
    derived probes, as one SuiteRun (the probes' time goes to the clock's "probes" phase)."""
    wanted_tests = None if tests is None else [t for t in tests if not t.startswith("probe::")]
    wanted_probes = probes if tests is None else [p for p in probes if p.id in set(tests)]
    wanted_probes = [p for p in wanted_probes if p.id not in set(deselect)]
    suite, raw = suite_and_probes(sandbox, command, wanted_probes, wanted_tests, timeout,
                                  [t for t in deselect if not t.startswith("probe::")], clock)
    suite.results.update(judge_probes(wanted_probes, raw))
    if extra is not None:
        with timed(clock, "probes"):
            suite.results.update(extra(sandbox, [p for p in wanted_probes if p.kind not in RAW_KINDS]))
    return suite


def hash_tree(sandbox: Sandbox, roots: list[str], paths: list[str] | None = None,
              exclude: Iterable[str] = ()) -> dict[str, str]:
    """sha256 of every regular file under roots (or of the given paths), computed inside the sandbox;
    `exclude` are paths (shell patterns) never entered.
    Uses coreutils, not the venv's interpreter, so it works however broken the environment is.
    """
    if paths is not None:  # named in as many commands as Linux's limit on one argument needs
        hashes: dict[str, str] = {}
        for chunk in word_chunks([shlex.quote(p) for p in paths]):
            hashes.update(_hashes(sandbox.run(f"sha256sum -- {' '.join(chunk)} 2>/dev/null; true", timeout=300).output))
        return hashes
    command = f"{_find(roots, exclude)} -print0 2>/dev/null | xargs -0 -r sha256sum 2>/dev/null; true"
    return _hashes(sandbox.run(command, timeout=300).output)


def _hashes(output: str) -> dict[str, str]:
    """path -> digest from sha256sum's output lines."""
    hashes = {}
    for line in output.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            hashes[name] = digest
    return hashes


_HASHES = "::miner-hashes::"  # separates the listing from the hashes in changed_since's output


def _find(roots: Iterable[str], exclude: Iterable[str]) -> str:
    pruned = " -o ".join(f"-path {shlex.quote(p)}" for p in exclude)
    prune = f"\\( {pruned} \\) -prune -o " if pruned else ""
    return f"find {' '.join(map(shlex.quote, roots))} -xdev {prune}-type f"


def changed_since(sandbox: Sandbox, marker: str, roots: list[str],
                  exclude: Iterable[str] = ()) -> tuple[set[str], dict[str, str]]:
    """(every regular file under roots, sha256 of those whose status changed after `marker` was
    written): what a later step did, without hashing what it left alone. A file created, changed,
    moved or linked has a new ctime, which no script can set back."""
    find = _find(roots, exclude)
    command = (f"{find} -print 2>/dev/null; echo {_HASHES}; "
               f"{find} -cnewer {shlex.quote(marker)} -print0 2>/dev/null | xargs -0 -r sha256sum 2>/dev/null; true")
    listing, _, hashed = sandbox.run(command, timeout=300).output.partition(f"{_HASHES}\n")
    return set(listing.splitlines()), _hashes(hashed)


def project_manifest(root: Path, test_files: list[str] = ()) -> tuple[dict[str, str], list[str]]:
    """(relative path -> sha256 for every project file, the protected subset: code, the test tree
    and the runner's configuration; see miner.projectfiles)."""
    hashes = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in project_files(root)}
    return hashes, [rel for rel in hashes if is_protected(rel, test_files)]


def _measure(backend: Backend, env: Healthy, command: str, probes: list[Probe], timeout: float,
             extra: ExtraProbes | None) -> tuple[SuiteRun, dict[str, dict]]:
    with backend.fork(env) as sandbox:
        suite, raw = suite_and_probes(sandbox, command, probes, timeout=timeout)
        if extra is not None:
            suite.results.update(extra(sandbox, [p for p in probes if p.kind not in RAW_KINDS]))
    return suite, raw


def _stable(runs: list[SuiteRun]) -> tuple[dict[str, TestResult], list[str]]:
    first, rest = runs[0].results, runs[1:]
    stable, flaky = {}, []
    for test_id, result in first.items():
        if all(test_id in r.results and r.results[test_id].outcome == result.outcome for r in rest):
            stable[test_id] = result
        else:
            flaky.append(test_id)
    for run in rest:
        flaky.extend(t for t in run.results if t not in first and t not in flaky)
    return stable, sorted(flaky)


def record_healthy(backend: Backend, env: Healthy, project: Project, spec: BuildSpec, command: str,
                   runs: int = 2, timeout: float = 600.0, extra_probes: list[Probe] | None = None,
                   extra: ExtraProbes | None = None, parallel: bool = False) -> HealthyState:
    """Measure the healthy state; raise SkipProject with the reason when it cannot be mined.
    With `parallel`, the suite's runs happen at the same time, each on its own fresh copy."""
    with backend.fork(env) as sandbox:
        try:
            installed = ecosystems.read_inventory(sandbox, Path(project.path))
        except InventoryError as exc:
            raise SkipProject(str(exc)) from exc
    probes = ecosystems.derived_probes(installed) + list(extra_probes or [])
    measured = []
    if parallel:
        with ThreadPoolExecutor(max_workers=runs, thread_name_prefix="miner-healthy") as pool:
            measured = list(pool.map(lambda _: _measure(backend, env, command, probes, timeout, extra), range(runs)))
    else:
        for _ in range(runs):  # a suite that hangs is skipped after its first timeout, not after every run
            measured.append(_measure(backend, env, command, probes, timeout, extra))
            if measured[-1][0].timed_out:
                break
    if any(suite.timed_out for suite, _ in measured):
        raise SkipProject(f"test suite exceeded its time limit of {timeout:.0f}s")
    suites = [suite for suite, _ in measured]
    probes = _expected_probes(probes, [raw for _, raw in measured])
    for suite, raw in measured:
        suite.results.update(judge_probes(probes, raw))
    stable, flaky = _stable(suites)
    _check_minable(stable, suites[0], derived_only_ok=bool(extra_probes))
    hashes, protected = _protected_files(backend, env, project, [test_file_of(t) or "" for t in stable])
    return HealthyState(
        repo=project.repo, commit=project.commit, backend=backend.name, test_command=command,
        outcomes={k: v.outcome for k, v in stable.items()},
        durations={k: v.duration for k, v in stable.items()},
        messages={k: v.message for k, v in stable.items() if v.message},
        flaky=flaky, probes=[p for p in probes if p.id in stable],
        distributions={d.name: d.version for d in installed["inventory"]}, **installed,
        file_hashes=hashes, protected=protected, env=dict(spec.env),
        suite_seconds=sum(s.duration for s in suites) / len(suites),
    )


def _protected_files(backend: Backend, env: Healthy, project: Project,
                     test_files: list[str]) -> tuple[dict[str, str], list[str]]:
    """The project's file hashes and its protected files (rules 3 and 7), as the environment holds
    them: a Dockerfile may move or drop files, so what is inside is what tasks protect."""
    hashes, protected = project_manifest(project.path, [f for f in test_files if f])
    with backend.fork(env) as sandbox:
        inside = hash_tree(sandbox, [], [f"{PROJECT_DIR}/{p}" for p in protected])
    protected = [p for p in protected if f"{PROJECT_DIR}/{p}" in inside]
    hashes.update({p: inside[f"{PROJECT_DIR}/{p}"] for p in protected})
    return hashes, protected


def measure_project(backend: Backend, env: Healthy, project: Project, spec: BuildSpec,
                    timeout: float, parallel: bool = False) -> HealthyState:
    """record_healthy plus what the backend sees beyond the project: probes derived from a
    container (its CMD, HEALTHCHECK, ports) and its observation of the system beneath
    (`state.system`). The local backend adds nothing."""
    extra_probes = backend.derived_probes(env)
    try:
        command = command_of(project)
    except ManifestError as exc:
        raise SkipProject(str(exc)) from exc
    if not extra_probes and (problem := ecosystems.suite_problem(Path(project.path))):
        raise SkipProject(problem)
    state = record_healthy(backend, env, project, spec, command, timeout=timeout,
                           extra_probes=extra_probes, extra=backend.run_derived_probes if extra_probes else None,
                           parallel=parallel)
    state.system = backend.observe(env) if backend.capabilities.system else None
    return state


def _expected_probes(probes: list[Probe], raws: list[dict[str, dict]]) -> list[Probe]:
    """Fix each probe's expected exit and digest from the first run (later runs check stability)."""
    fixed = []
    for probe in probes:
        got = raws[0].get(probe.id) if raws else None
        if got is None and probe.expected_exit is None:
            continue
        if got is not None and probe.kind in ("import", "script"):
            probe = probe.model_copy(update={"expected_exit": got["exit"], "expected_digest": got["digest"]})
        fixed.append(probe)
    return fixed


def _check_minable(stable: dict[str, TestResult], first: SuiteRun, derived_only_ok: bool) -> None:
    """Skip projects with no tests or no passing tests (a Dockerized project may rely on probes)."""
    tests = {k: v for k, v in stable.items() if not k.startswith("probe::")}
    probes_passing = [k for k, v in stable.items() if k.startswith("probe::") and v.outcome == "passed"]
    if not tests and not (derived_only_ok and probes_passing):
        tail = "\n".join(first.output_tail.strip().splitlines()[-5:])
        raise SkipProject(f"no tests found (exit {first.exit_code}){': ' + tail if tail else ''}")
    if tests and not any(v.outcome == "passed" for v in tests.values()):
        first_one = min(tests.values(), key=lambda result: result.id)  # often a collection error: say which
        said = first_one.message.strip().splitlines()[0] if first_one.message.strip() else ""
        raise SkipProject(f"no passing tests ({len(tests)} collected, none passed; {first_one.id} "
                          f"{first_one.outcome}{': ' + said if said else ''})")


def passing(outcomes: dict[str, Outcome]) -> set[str]:
    return {k for k, v in outcomes.items() if v == "passed"}
