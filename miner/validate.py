"""Validator: applies the acceptance rules of the design note to one candidate inversion.

Rules, cheapest first: (8) recoverable, decided before anything runs: the inversion names its
evidence, and its fix carries no copy of the answer (at most MAX_FIX_LITERAL bytes of literal
data, no decoded payload); (1) the break runs inside a fresh copy within its limit; (3) the
project's code and (7) its test tree and runner configuration stay byte-identical, each rejected
under its own rule; (2) F2P non-empty, and P2P non-empty when the healthy suite has several
passing tests (unless the type is labelled whole-suite); (6) no copy of what the break changed is
left anywhere in the sandbox; (4) the fix, run with the network only when its evidence needs it
(the package index, the Debian archive, the published source), brings every healthy-passing test
back; (5) the break replayed on another fresh copy gives the same F2P set. The solver's view
(rule `solver-view`): the command the instruction will show, run in a login shell and in
`bash -c` (miner.solver_view), fails with its first error line after the break and passes after
the fix, in the same sandbox, one run each. A test run of the candidate that takes more than
HANG_FACTOR healthy suite times is cut and the candidate rejected (rule `hangs`). Rule 6 scans what the
backend declares a break may touch (Capabilities.scan_roots: the sandbox folder locally, the
whole container file system on Docker).
When the dependency graph predicted the blast radius and running it alone costs less than half
a suite run (by the healthy durations), the predicted tests run first and a candidate none of
them notices stops early; otherwise the rest of the suite runs, so every test runs once in the
broken state. With `Context.overlap` (a spare core), the replay (rule 5) runs on its own fresh
copy beside the fix (rule 4) instead of after it.
"""

from __future__ import annotations

import base64
import re
import shlex
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from miner import ecosystems
from miner.evidence import MAX_FIX_LITERAL, decoded_payload, literal_bytes, needs_network
from miner.healthy import MINER_DIR, ExtraProbes, changed_since, hash_tree, passing, run_checks
from miner.instruction import candidate_symptom
from miner.models import PROJECT_DIR, Candidate, HealthyState, Inversion, RejectRule, SolverView, SuiteRun
from miner.projectfiles import in_test_tree, is_runner_config, test_file_of
from miner.sandbox.base import Backend, Capabilities, Healthy, Sandbox
from miner.solver_view import judge, log_text, read_view, view_script
from miner.testing import observed
from miner.timing import Clock

SCRIPT_TIMEOUT = 300.0
FORKED = f"{MINER_DIR}/forked"  # written before the break: what changed after it is the break's doing
DIST_INFO = re.compile(r"^(.*/[^/-]+)-[^/]+\.dist-info/")
INLINE_SCRIPT = 36 * 1024  # scripts up to this size go inside the command that runs them (base64)
NOT_WRITTEN = 213  # exit code of an inline script that could not be written (no base64 there)
PREDICT_SHARE = 0.5  # run the predicted tests first when that costs at most this share of a suite run
# A candidate's suite runs are cut after HANG_FACTOR healthy suite times (never sooner than
# MIN_RUN_TIMEOUT, never later than the crawl's --timeout): a break whose tests run that long made
# them hang, and waiting out --timeout on each of its runs would cost more than the project's
# whole crawl.
HANG_FACTOR = 10.0
MIN_RUN_TIMEOUT = 60.0


@dataclass
class Context:
    """What the validator needs about one project, computed once per crawl of it."""

    backend: Backend
    env: Healthy
    state: HealthyState
    manifest: dict[str, str]  # sandbox path -> sha256 of every file of the healthy sandbox
    timeout: float = 600.0
    extra: ExtraProbes | None = None
    # Stored tasks of the project by (family, F2P set), and how many may share one (duplicate-symptom).
    symptoms: dict[tuple[str, frozenset[str]], int] = field(default_factory=dict)
    per_symptom: int = 1
    overlap: bool = False  # a spare core: the replay runs beside the fix


class Rejected(Exception):
    def __init__(self, rule: RejectRule, detail: str) -> None:
        super().__init__(detail)
        self.rule, self.detail = rule, detail


def scan(sandbox: Sandbox, capabilities: Capabilities) -> dict[str, str]:
    """Hashes of every file a break may touch: under the backend's scan roots, but its excludes."""
    hashes = hash_tree(sandbox, list(capabilities.scan_roots), exclude=capabilities.scan_exclude)
    return {p: h for p, h in hashes.items() if not p.startswith(MINER_DIR)}


def healthy_manifest(backend: Backend, env: Healthy) -> dict[str, str]:
    """Hashes of every file of a fresh healthy copy that a break may touch, for the answer-leak rule."""
    with backend.fork(env) as sandbox:
        return scan(sandbox, backend.capabilities)


class Run:
    """One candidate's validation, keeping its evidence as it goes."""

    def __init__(self, ctx: Context, inversion: Inversion) -> None:
        self.ctx, self.inv = ctx, inversion
        self.logs: dict[str, str] = {}
        self.suite_runs = 0.0
        self.healthy_pass = passing(ctx.state.outcomes)
        self.clock = Clock()
        self.lock = threading.Lock()  # the replay may run in a second thread
        measured = ctx.state.suite_seconds
        self.timeout = min(ctx.timeout, max(MIN_RUN_TIMEOUT, HANG_FACTOR * measured)) if measured > 0 else ctx.timeout

    @contextmanager
    def fork(self, phase: str = "fork") -> Iterator[Sandbox]:
        """A fresh healthy sandbox, its start and removal timed."""
        with self.clock.phase(phase):
            sandbox = self.ctx.backend.fork(self.ctx.env)
        try:
            yield sandbox
        finally:
            with self.clock.phase("close"):
                sandbox.close()

    def apply(self, sandbox: Sandbox, name: str, script: str, network: bool, mark: bool = False) -> None:
        """Run a break or fix script (with `mark`, FORKED is written first: rule 6 looks at what
        changed after it)."""
        with self.clock.phase("replay-break" if name == "break-replay" else name):
            self._apply(sandbox, name, script, network, mark)

    def _apply(self, sandbox: Sandbox, name: str, script: str, network: bool, mark: bool) -> None:
        path, data = f"{MINER_DIR}/{name}.sh", script.encode()
        run = f"bash {path}; rc=$?; rm -f {path}; exit $rc"
        result = None
        if len(data) <= INLINE_SCRIPT:  # one command instead of a put and a run
            write = (f"mkdir -p {MINER_DIR} && {': > ' + FORKED + ' && ' if mark else ''}"
                     f"echo {base64.b64encode(data).decode()} | base64 -d > {path} || exit {NOT_WRITTEN}")
            result = sandbox.run(f"{write}; {run}", network=network, timeout=SCRIPT_TIMEOUT)
        if result is None or result.exit_code == NOT_WRITTEN:
            if mark:
                sandbox.put(FORKED, b"")
            sandbox.put(path, data, mode=0o755)
            result = sandbox.run(run, network=network, timeout=SCRIPT_TIMEOUT)
        sandbox.settle()  # the tests run with no process the script left, as the exported verifier does
        self.logs[name] = f"$ {name}.sh (exit {result.exit_code}, {result.duration:.1f}s)\n{result.output}"
        if result.exit_code != 0 or result.timed_out:
            rule: RejectRule = "break-failed" if name.startswith("break") else "fix-failed"
            raise Rejected(rule, f"{name} script exited {result.exit_code}{' (timed out)' if result.timed_out else ''}: "
                                 f"{result.output.strip()[-300:]}")

    def check(self, sandbox: Sandbox, phase: str, tests: list[str] | None = None, deselect: list[str] = ()) -> SuiteRun:
        with self.clock.phase(phase):
            suite = run_checks(sandbox, self.ctx.state.test_command, self.ctx.state.probes, tests=tests,
                               timeout=self.timeout, extra=self.ctx.extra, clock=self.clock, deselect=deselect)
        total = max(len(self.ctx.state.outcomes), 1)
        with self.lock:
            self.suite_runs += (len(tests) if tests is not None else total - len(deselect)) / total
        if suite.timed_out:
            raise Rejected("hangs", f"the {phase} test run was cut after {self.timeout:.0f}s (the healthy suite takes "
                                    f"{self.ctx.state.suite_seconds:.1f}s): the tests hang")
        return suite

    def worth_predicting(self, predicted: list[str]) -> bool:
        """Whether the predicted tests alone cost at most PREDICT_SHARE of a suite run: the run's
        fixed cost (start-up, collection) is the healthy suite time less its tests' durations."""
        state = self.ctx.state
        fixed = max(state.suite_seconds - sum(state.durations.values()), 0.0)
        return fixed + sum(state.durations.get(t, 0.0) for t in predicted) <= PREDICT_SHARE * state.suite_seconds

    def replay(self, inv: Inversion) -> list[str]:
        """Rule 5's F2P set: the break replayed on another fresh copy."""
        with self.fork("replay-fork") as again:
            self.apply(again, "break-replay", inv.break_script, inv.network_break)
            return self.f2p_p2p(self.check(again, "replay"))[0]

    def f2p_p2p(self, suite: SuiteRun) -> tuple[list[str], list[str]]:
        outcomes = suite.outcomes()
        f2p = sorted(t for t in self.healthy_pass if outcomes.get(t) != "passed")
        return f2p, sorted(self.healthy_pass - set(f2p))

    def protected_unchanged(self, sandbox: Sandbox) -> None:
        with self.clock.phase("protected"):
            self._protected_unchanged(sandbox)

    def _protected_unchanged(self, sandbox: Sandbox) -> None:
        """Rules 3 and 7: the project's code, and apart from it its test tree and runner configuration
        (the judge), are byte-identical to the healthy state; each is rejected under its own rule."""
        state = self.ctx.state
        now = hash_tree(sandbox, [], paths=[f"{PROJECT_DIR}/{p}" for p in state.protected])
        changed = [p for p in state.protected if now.get(f"{PROJECT_DIR}/{p}") != state.file_hashes[p]]
        tests = {path for path in map(test_file_of, state.outcomes) if path}
        judging = [p for p in changed if in_test_tree(p, tests) or is_runner_config(p)]
        code = [p for p in changed if p not in judging]
        if code:
            raise Rejected("protected-changed", f"protected code changed: {', '.join(code[:5])}")
        if judging:
            raise Rejected("test-tree-changed", f"the tests are the judge: the break changed {', '.join(judging[:5])}")
        runner = ecosystems.runner_for(state.test_command)
        added = added_collected_files(sandbox, state, self.ctx.manifest, tests, runner.collect_reads)
        if added:
            raise Rejected("test-tree-changed", f"the tests are the judge: the break added {', '.join(added[:5])}, "
                                                f"which {runner.name} reads when it collects them")

    def no_leak(self, sandbox: Sandbox) -> None:
        with self.clock.phase("scan"):
            self._no_leak(sandbox)

    def _no_leak(self, sandbox: Sandbox) -> None:
        """Rule 6: no file of the broken state holds the original bytes of a changed/removed file.

        Only files changed since the fork are hashed (the others hold what they held healthy);
        which of the healthy files are gone comes from the listing of every file."""
        before = self.ctx.manifest
        caps = self.ctx.backend.capabilities
        present, after = changed_since(sandbox, FORKED, list(caps.scan_roots), caps.scan_exclude)
        after = {p: h for p, h in after.items() if not p.startswith(MINER_DIR)}
        counts: dict[str, int] = {}
        for digest in before.values():
            counts[digest] = counts.get(digest, 0) + 1
        # only contents unique in the healthy state: empty or boilerplate files repeat innocently
        lost = {h: p for p, h in before.items() if (p not in present or after.get(p, h) != h) and counts[h] == 1}
        leaks = [f"{path} holds the original of {lost[h]}" for path, h in after.items()
                 if h in lost and before.get(path) != h and _unversioned(path) != _unversioned(lost[h])]
        if leaks:
            raise Rejected("answer-leaked", "; ".join(leaks[:3]))

    def solver_view(self, sandbox: Sandbox, view: SolverView, fixed: bool) -> None:
        """The instruction's command in a solver's login shell and `bash -c` (one run for both):
        before the fix it fails showing the instruction's first error line, after it passes."""
        with self.clock.phase("solver-view"):
            result = sandbox.run(view_script(view.command, self.timeout), timeout=2 * self.timeout + 60)
        runs = read_view(result.output)
        self.logs[f"solver-view-{'fixed' if fixed else 'broken'}"] = log_text(runs) if runs else result.output[-4000:]
        problems = judge(view, runs, fixed)
        if problems:
            state = "after the fix" if fixed else "in the broken environment"
            raise Rejected("solver-view", f"{state}, the instruction's command `{view.command}`: "
                                          + "; ".join(problems))


def added_collected_files(sandbox: Sandbox, state: HealthyState, manifest: dict[str, str],
                          tests: set[str], reads: tuple[str, ...]) -> list[str]:
    """Rule 7 for files the healthy state did not have: a file the test runner reads when it
    collects the tests (`reads`, its Runner's collect_reads: pytest's conftest.py, __init__.py,
    its configuration files) added in the test tree, in a folder above a test module, or in a
    folder above the project (the sandbox, the root)."""
    if not reads:
        return []
    names = " -o ".join(f"-name {shlex.quote(name)}" for name in reads)
    above = [str(folder / name) for folder in PurePosixPath(PROJECT_DIR).parents for name in reads]
    command = (f"find {PROJECT_DIR} \\( {names} \\) -print 2>/dev/null; "
               f"for f in {' '.join(map(shlex.quote, above))}; do [ -e \"$f\" ] && echo \"$f\"; done; true")
    found = sandbox.run(command, timeout=120).output.splitlines()
    folders = {str(parent) for path in tests for parent in PurePosixPath(path).parents}
    added = []
    for path in found:
        rel = path.removeprefix(f"{PROJECT_DIR}/") if path.startswith(f"{PROJECT_DIR}/") else None
        if path in manifest or (rel is not None and rel in state.file_hashes):
            continue
        folder = str(PurePosixPath(rel).parent) if rel is not None else None
        if rel is None or folder in folders or in_test_tree(rel, tests):
            added.append(path)
    return sorted(added)


def recoverable(inv: Inversion) -> None:
    """Rule 8, before anything runs: the inversion names the evidence its fix recovers from, and the
    fix carries no copy of the answer (a decoded payload, or more than a short literal)."""
    if not inv.evidence:
        raise Rejected("unrecoverable", f"no evidence: {inv.no_evidence or 'the inversion names none'}")
    size = literal_bytes(inv.fix_script)
    decoder = decoded_payload(inv.fix_script)
    if decoder:
        raise Rejected("unrecoverable", f"the fix decodes a payload ({decoder!r}; {size} bytes of literal data): "
                                        "it carries a copy of the answer instead of recovering it from evidence")
    if size > MAX_FIX_LITERAL:
        raise Rejected("unrecoverable", f"the fix carries {size} bytes of literal data (at most {MAX_FIX_LITERAL}): "
                                        "a copy of the answer, not a value its evidence names")


def fix_network(inv: Inversion) -> bool:
    """Whether the fix runs with the network: only when its evidence needs it (index, archive, sdist)."""
    return needs_network([e.kind for e in inv.evidence])


def _unversioned(path: str) -> str:
    """A file of a .dist-info folder stands for the distribution's metadata, whatever its version:
    another release of the same distribution carries identical files (LICENSE, top_level.txt),
    at times elsewhere in that folder (licenses/LICENSE), that are no backup."""
    found = DIST_INFO.match(path)
    return f"{found.group(1)}.dist-info/" if found else path


def validate(ctx: Context, inversion: Inversion, whole_suite_ok: bool = False) -> Candidate:
    """Judge one candidate; the Candidate keeps the rule that rejected it or the evidence of a task."""
    run, start = Run(ctx, inversion), time.monotonic()
    fields: dict = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="miner-replay") as aside:
        try:
            recoverable(inversion)
            fields = _judge(run, inversion, whole_suite_ok, aside if ctx.overlap else None)
            status, rule, detail = "validated", None, ""
        except Rejected as rejection:
            status, rule, detail = "rejected", rejection.rule, rejection.detail
    return Candidate(
        id=inversion.id_for(ctx.env.project), repo=ctx.state.repo, commit=ctx.state.commit, inversion=inversion,
        status=status, rule=rule, detail=detail, suite_runs=round(run.suite_runs, 3),
        seconds=round(time.monotonic() - start, 3), logs=run.logs, timings=run.clock.rounded(), **fields)


def _judge(run: Run, inv: Inversion, whole_suite_ok: bool, aside: ThreadPoolExecutor | None) -> dict:
    ctx = run.ctx
    with run.fork() as sandbox:
        run.apply(sandbox, "break", inv.break_script, inv.network_break, mark=True)
        run.protected_unchanged(sandbox)
        broken = _broken_run(run, sandbox, inv)
        f2p, p2p = run.f2p_p2p(broken)
        if not f2p:
            raise Rejected("no-f2p", "every healthy-passing test still passes")
        if not p2p and len(run.healthy_pass) > 1 and not whole_suite_ok:
            raise Rejected("no-p2p", f"all {len(f2p)} healthy-passing tests fail: the break kills the whole suite")
        if ctx.symptoms.get((inv.family, frozenset(f2p)), 0) >= ctx.per_symptom:
            raise Rejected("duplicate-symptom", f"a stored {inv.family} task of this project already fails exactly "
                                                f"these {len(f2p)} tests")
        replay: Future[list[str]] | None = aside.submit(run.replay, inv) if aside is not None else None
        run.no_leak(sandbox)
        messages = {t: found.message for t in f2p if (found := observed(broken, t)) is not None}
        view = candidate_symptom(inv, f2p, broken.outcomes(), messages, ctx.state).view()
        run.solver_view(sandbox, view, fixed=False)
        run.apply(sandbox, "fix", inv.fix_script, fix_network(inv))
        fixed = run.check(sandbox, "fixed")
        still = sorted(t for t in run.healthy_pass if fixed.outcomes().get(t) != "passed")
        if still:
            raise Rejected("fix-failed", f"{len(still)} tests still fail after the fix: {', '.join(still[:5])}")
        run.solver_view(sandbox, view, fixed=True)
    replay_f2p = replay.result() if replay is not None else run.replay(inv)
    if replay_f2p != f2p:
        diff = sorted(set(replay_f2p) ^ set(f2p))
        raise Rejected("not-reproducible", f"replayed break gave a different F2P set (differs in {', '.join(diff[:5])})")
    return {"f2p": f2p, "p2p": p2p, "broken": broken.outcomes(), "fixed": fixed.outcomes(),
            "broken_messages": messages}


def _broken_run(run: Run, sandbox: Sandbox, inv: Inversion) -> SuiteRun:
    """The broken state's outcomes. When the predicted blast radius is cheap to run alone, it runs
    first and a break none of it notices stops there; then the rest of the suite runs."""
    predicted = sorted(set(inv.predicted_f2p or []) & run.healthy_pass)
    if not predicted or len(predicted) == len(run.healthy_pass) or not run.worth_predicting(predicted):
        return run.check(sandbox, "broken")
    first = run.check(sandbox, "predicted", tests=predicted)
    if all(first.outcomes().get(t) == "passed" for t in predicted):
        raise Rejected("no-f2p", f"none of the {len(predicted)} predicted tests failed (stopped early)")
    rest = run.check(sandbox, "broken", deselect=predicted)
    rest.results.update(first.results)
    return rest
