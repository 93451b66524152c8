"""Run a project's test suite inside a sandbox and read per-test outcomes from its runner's report.

The runner serving the test command (miner.ecosystems.runner_for: pytest and its junit XML, node's
test runner or tape and miner's reporters' JSON lines) writes the command and reads the report;
outcomes never come from console output. Test ids are the runner's (pytest node ids
`tests/test_x.py::TestK::test_y[param]`, Node's `test/x.js::suite::name`), so they can be passed
back to run a subset.

    suite = run_suite(sandbox, command_of(project))
    again = run_suite(sandbox, suite_command, tests=["tests/test_x.py::test_y"])
    suite, then = run_suite_then(sandbox, command, then="more shell")   # one command, one more section

The report comes back in the same command's output (gzip + base64 between markers, then it is
removed), so a run costs one command in the sandbox, not three; `then` appends more shell to
that command (the derived probes), whose output comes back separately.
"""

from __future__ import annotations

import base64
import gzip
import shlex
import time
import uuid
from pathlib import Path

from miner import ecosystems
from miner.models import SANDBOX_ROOT, Outcome, Project, RunResult, SuiteRun, TestResult
from miner.sandbox.base import COMMAND_BUDGET, Sandbox

REPORT_DIR = f"{SANDBOX_ROOT}/.miner"
TAIL_CHARS = 4000
RETRIES = 3
REPORT_BEGIN, REPORT_END = "::miner-junit-begin::", "::miner-junit-end::"
THEN_BEGIN = "::miner-then-begin::"


def command_of(project: Project) -> str:
    """The project's test command: the `test=` override, else its ecosystem's (ecosystems.project_command)."""
    return project.source.overrides.get("test") or ecosystems.project_command(Path(project.path))


def _script(command: str, report: str, tests: list[str] | None, deselect: list[str], then: str) -> str:
    """The suite, its report printed between markers (and removed), then `then`; exit as the suite."""
    quoted = shlex.quote(report)
    dump = (f"if [ -f {quoted} ] && miner_b64=$(gzip -c {quoted} | base64 -w0) && [ -n \"$miner_b64\" ]; then "
            f"printf '\\n%s\\n%s\\n%s\\n' {REPORT_BEGIN} \"$miner_b64\" {REPORT_END}; rm -f {quoted}; fi")
    more = f"; printf '\\n%s\\n' {THEN_BEGIN}; {then}" if then else ""
    run = ecosystems.runner_for(command).suite_command(command, report, tests, deselect)
    return (f"mkdir -p {REPORT_DIR}; {run}; miner_rc=$?; "
            f"{dump}{more}; exit $miner_rc")


def run_suite(sandbox: Sandbox, command: str, tests: list[str] | None = None, timeout: float | None = None,
              deselect: list[str] = ()) -> SuiteRun:
    """Run the suite (or just `tests`, or all but `deselect`) and return one TestResult per test
    in the report.

    Asked-for ids absent from the report are "missing". A run without a readable report
    (collection crash, timeout) has no results; its output tail says why.
    """
    return run_suite_then(sandbox, command, tests, timeout, deselect)[0]


def run_suite_then(sandbox: Sandbox, command: str, tests: list[str] | None = None, timeout: float | None = None,
                   deselect: list[str] = (), then: str = "") -> tuple[SuiteRun, str | None]:
    """run_suite, with the shell `then` run after the suite in the same command: (the suite, the
    output of `then`, None when it did not run to the end of the suite: a timeout)."""
    if tests is not None and not tests:
        return SuiteRun(command=command, exit_code=0, duration=0.0), None
    start = time.monotonic()
    wanted = list(tests) if tests is not None else None
    result, results, after = _run_once(sandbox, command, wanted, timeout, list(deselect), then)
    for _ in range(RETRIES):
        refused = ecosystems.runner_for(command).refused(result.output) if wanted else set()
        if not refused or result.timed_out:
            break
        # pytest runs nothing when one asked-for id cannot be collected: run again without those,
        # keeping the collection errors the refused run reported.
        wanted = [t for t in wanted or [] if t not in refused]
        if not wanted:
            break
        left = None if timeout is None else max(1.0, timeout - (time.monotonic() - start))
        result, retried, _ = _run_once(sandbox, command, wanted, left, list(deselect), "")
        results |= retried
    for test_id in tests or []:
        results.setdefault(test_id, TestResult(id=test_id, outcome="missing"))
    return SuiteRun(
        command=command,
        exit_code=result.exit_code,
        duration=round(time.monotonic() - start, 3),
        results=results,
        output_tail=result.output[-TAIL_CHARS:],
        timed_out=result.timed_out,
    ), after


def observed(suite: SuiteRun, test_id: str) -> TestResult | None:
    """What a run reported of one test: its result; under a runner whose files fail before their
    tests run as the file alone (Node's), for a test absent from the report (or missing) whose
    file failed so, that file's error."""
    found = suite.results.get(test_id)
    if found is not None and found.outcome != "missing":
        return found
    file = test_id.split("::", 1)[0]
    if file != test_id and ecosystems.runner_for(suite.command).file_errors_stand_for_tests and file in suite.results:
        return TestResult(id=test_id, outcome="error", message=suite.results[file].message)
    return found


def _run_once(sandbox: Sandbox, command: str, tests: list[str] | None, timeout: float | None, deselect: list[str],
              then: str) -> tuple[RunResult, dict[str, TestResult], str | None]:
    report = f"{REPORT_DIR}/report-{uuid.uuid4().hex[:12]}.xml"
    named, unnamed = _nameable(tests, deselect)
    result = sandbox.run(_script(command, report, named, unnamed, then), timeout=timeout)
    output, after = result.output, None
    if then and f"\n{THEN_BEGIN}\n" in output:
        output, _, after = output.rpartition(f"\n{THEN_BEGIN}\n")
    output, data = _report_of(output)
    if data is None and not result.timed_out:  # no gzip or base64 in the sandbox: the file is still there
        data = sandbox.read(report)
        sandbox.run(f"rm -f {shlex.quote(report)}", timeout=60)
    results = ecosystems.runner_for(command).parse_report(data) if data else {}
    if named != tests:  # a wider run than asked: keep the asked-for tests only
        results = {k: v for k, v in results.items() if k in set(tests or ())}
    if unnamed != deselect:
        results = {k: v for k, v in results.items() if k not in set(deselect)}
    return result.model_copy(update={"output": output}), results, after


def _fits(ids: list[str]) -> bool:
    return sum(len(shlex.quote(t)) + 1 for t in ids) <= COMMAND_BUDGET  # a parametrized suite's ids pass it easily


def _nameable(tests: list[str] | None, deselect: list[str]) -> tuple[list[str] | None, list[str]]:
    """The selection one command can name: too many test ids are widened to their files (or to
    the whole suite), too many deselected ones are run anyway; the caller drops what it did not ask for."""
    if tests and not _fits(tests):
        files = sorted({t.split("::", 1)[0] for t in tests})
        tests = files if _fits(files) else None
    return tests, deselect if _fits(deselect) else []


def _report_of(output: str) -> tuple[str, bytes | None]:
    """(the output without the report, the report's bytes or None) of a suite command's output."""
    head, found, rest = output.rpartition(f"\n{REPORT_BEGIN}\n")
    blob, ended, _ = rest.partition(f"\n{REPORT_END}\n")
    if not found or not ended:
        return output, None
    try:
        return head, gzip.decompress(base64.b64decode(blob.strip()))
    except (ValueError, OSError, EOFError):
        return head, None


def outcome_diff(before: dict[str, Outcome], after: dict[str, Outcome]) -> list[tuple[str, Outcome, Outcome]]:
    """(id, old, new) for every test whose outcome changed; a test absent on one side is "missing"."""
    changed = []
    for test_id in sorted(set(before) | set(after)):
        old, new = before.get(test_id, "missing"), after.get(test_id, "missing")
        if old != new:
            changed.append((test_id, old, new))
    return changed
