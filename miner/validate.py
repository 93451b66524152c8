"""Validator: applies the acceptance rules of the design note to one candidate inversion.

Rules, cheapest first: (1) the break runs inside a fresh copy within its limit; (3) protected
code and test files stay byte-identical; (2) F2P non-empty, and P2P non-empty when the healthy
suite has several passing tests (unless the type is labelled whole-suite); (6) no copy of what
the break changed is left anywhere in the sandbox; (4) the fix brings every healthy-passing test
back; (5) the break replayed on another fresh copy gives the same F2P set. Rule 6 scans what
the backend declares a break may touch (Capabilities.scan_roots: the sandbox folder locally, the
whole container file system on Docker).
When the dependency graph predicted the blast radius, the predicted tests run first and a
candidate none of them notices stops early (stored F2P/P2P always come from full runs).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from miner.healthy import MINER_DIR, ExtraProbes, changed_since, hash_tree, passing, run_checks
from miner.models import PROJECT_DIR, Candidate, HealthyState, Inversion, RejectRule, SuiteRun
from miner.sandbox.base import Backend, Capabilities, Healthy, Sandbox

SCRIPT_TIMEOUT = 300.0
FORKED = f"{MINER_DIR}/forked"  # written before the break: what changed after it is the break's doing
DIST_INFO = re.compile(r"^(.*/[^/-]+)-[^/]+\.dist-info/")


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

    def apply(self, sandbox: Sandbox, name: str, script: str, network: bool) -> None:
        sandbox.put(f"{MINER_DIR}/{name}.sh", script.encode(), mode=0o755)
        result = sandbox.run(f"bash {MINER_DIR}/{name}.sh; rc=$?; rm -f {MINER_DIR}/{name}.sh; exit $rc",
                             network=network, timeout=SCRIPT_TIMEOUT)
        self.logs[name] = f"$ {name}.sh (exit {result.exit_code}, {result.duration:.1f}s)\n{result.output}"
        if result.exit_code != 0 or result.timed_out:
            rule: RejectRule = "break-failed" if name.startswith("break") else "fix-failed"
            raise Rejected(rule, f"{name} script exited {result.exit_code}{' (timed out)' if result.timed_out else ''}: "
                                 f"{result.output.strip()[-300:]}")

    def check(self, sandbox: Sandbox, tests: list[str] | None = None) -> SuiteRun:
        suite = run_checks(sandbox, self.ctx.state.test_command, self.ctx.state.probes, tests=tests,
                           timeout=self.ctx.timeout, extra=self.ctx.extra)
        total = max(len(self.ctx.state.outcomes), 1)
        self.suite_runs += 1.0 if tests is None else len(tests) / total
        return suite

    def f2p_p2p(self, suite: SuiteRun) -> tuple[list[str], list[str]]:
        outcomes = suite.outcomes()
        f2p = sorted(t for t in self.healthy_pass if outcomes.get(t) != "passed")
        return f2p, sorted(self.healthy_pass - set(f2p))

    def protected_unchanged(self, sandbox: Sandbox) -> None:
        paths = [f"{PROJECT_DIR}/{p}" for p in self.ctx.state.protected]
        now = hash_tree(sandbox, [], paths=paths)
        changed = [p for p in self.ctx.state.protected if now.get(f"{PROJECT_DIR}/{p}") != self.ctx.state.file_hashes[p]]
        if changed:
            raise Rejected("protected-changed", f"protected files changed: {', '.join(changed[:5])}")

    def no_leak(self, sandbox: Sandbox) -> None:
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
    try:
        fields = _judge(run, inversion, whole_suite_ok)
        status, rule, detail = "validated", None, ""
    except Rejected as rejection:
        status, rule, detail = "rejected", rejection.rule, rejection.detail
    return Candidate(
        id=inversion.id_for(ctx.env.project), repo=ctx.state.repo, commit=ctx.state.commit, inversion=inversion,
        status=status, rule=rule, detail=detail, suite_runs=round(run.suite_runs, 3),
        seconds=round(time.monotonic() - start, 3), logs=run.logs, **fields)


def _judge(run: Run, inv: Inversion, whole_suite_ok: bool) -> dict:
    ctx = run.ctx
    with ctx.backend.fork(ctx.env) as sandbox:
        sandbox.put(FORKED, b"")
        run.apply(sandbox, "break", inv.break_script, inv.network_break)
        run.protected_unchanged(sandbox)
        _early_stop(run, sandbox, inv)
        broken = run.check(sandbox)
        f2p, p2p = run.f2p_p2p(broken)
        if not f2p:
            raise Rejected("no-f2p", "every healthy-passing test still passes")
        if not p2p and len(run.healthy_pass) > 1 and not whole_suite_ok:
            raise Rejected("no-p2p", f"all {len(f2p)} healthy-passing tests fail: the break kills the whole suite")
        if ctx.symptoms.get((inv.family, frozenset(f2p)), 0) >= ctx.per_symptom:
            raise Rejected("duplicate-symptom", f"a stored {inv.family} task of this project already fails exactly "
                                                f"these {len(f2p)} tests")
        run.no_leak(sandbox)
        run.apply(sandbox, "fix", inv.fix_script, inv.network_fix)
        fixed = run.check(sandbox)
        still = sorted(t for t in run.healthy_pass if fixed.outcomes().get(t) != "passed")
        if still:
            raise Rejected("fix-failed", f"{len(still)} tests still fail after the fix: {', '.join(still[:5])}")
    with ctx.backend.fork(ctx.env) as again:
        run.apply(again, "break-replay", inv.break_script, inv.network_break)
        replay_f2p, _ = run.f2p_p2p(run.check(again))
    if replay_f2p != f2p:
        diff = sorted(set(replay_f2p) ^ set(f2p))
        raise Rejected("not-reproducible", f"replayed break gave a different F2P set (differs in {', '.join(diff[:5])})")
    return {"f2p": f2p, "p2p": p2p, "broken": broken.outcomes(), "fixed": fixed.outcomes(),
            "broken_messages": {t: broken.results[t].message for t in f2p if t in broken.results}}


def _early_stop(run: Run, sandbox: Sandbox, inv: Inversion) -> None:
    """Run the predicted blast radius first; stop when none of those tests notices the break."""
    predicted = sorted(set(inv.predicted_f2p or []) & run.healthy_pass)
    if not predicted or len(predicted) == len(run.healthy_pass):
        return
    suite = run.check(sandbox, tests=predicted)
    if all(suite.outcomes().get(t) == "passed" for t in predicted):
        raise Rejected("no-f2p", f"none of the {len(predicted)} predicted tests failed (stopped early)")
