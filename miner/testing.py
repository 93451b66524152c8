"""Run a project's pytest suite inside a sandbox and read per-test outcomes from its junit XML.

Outcomes come from the XML report (xunit1, which carries each test's file), never from console
output. Test ids are pytest node ids (`tests/test_x.py::TestK::test_y[param]`) rebuilt from
the report, so they can be passed back to pytest to run a subset.

    suite = run_suite(sandbox, pytest_command(project))
    again = run_suite(sandbox, suite_command, tests=["tests/test_x.py::test_y"])
    suite, then = run_suite_then(sandbox, command, then="more shell")   # one command, one more section

The report comes back in the same command's output (gzip + base64 between markers, then it is
removed), so a run costs one command in the sandbox, not three; `then` appends more shell to
that command (the derived probes), whose output comes back separately.
"""

from __future__ import annotations

import base64
import gzip
import re
import shlex
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from miner.ecosystems.node import runner as node_runner
from miner.ecosystems.node import tape as node_tape
from miner.models import PROJECT_DIR, SANDBOX_ROOT, Outcome, Project, RunResult, SuiteRun, TestResult
from miner.projectfiles import project_files
from miner.sandbox.base import COMMAND_BUDGET, Sandbox

REPORT_DIR = f"{SANDBOX_ROOT}/.miner"
DEFAULT_COMMAND = "python -m pytest"
# Flags appended to every run. A collection error in one module must not hide the other modules'
# outcomes, so collection errors do not stop the session.
REPORT_FLAGS = "-o junit_family=xunit1 -p no:cacheprovider -q --continue-on-collection-errors"
MESSAGE_LINES = 6
MESSAGE_CHARS = 1000
TAIL_CHARS = 4000
# How pytest refuses asked-for ids it cannot collect (it then runs nothing at all).
NOT_FOUND = re.compile(r"^ERROR: (?:not found:|found no collectors for) (\S.*?)\s*$", re.MULTILINE)
RETRIES = 3
REPORT_BEGIN, REPORT_END = "::miner-junit-begin::", "::miner-junit-end::"
THEN_BEGIN = "::miner-then-begin::"


def pytest_command(project: Project) -> str:
    """The project's test command: the `test=` override; for a project without Python files
    whose package.json runs node's test runner or tape, that command; else `python -m pytest`."""
    if override := project.source.overrides.get("test"):
        return override
    root = Path(project.path)
    if not any(f.endswith(".py") for f in project_files(root)) and (command := node_runner.project_command(root)):
        return command
    return DEFAULT_COMMAND


def suite_command(command: str, report: str, tests: list[str] | None = None, deselect: list[str] = ()) -> str:
    """The shell command that runs `command` writing a junit report (and only `tests`, if given;
    without the `deselect`ed ones)."""
    parts = [command, f"--junitxml={shlex.quote(report)}", REPORT_FLAGS]
    parts += [f"--deselect={shlex.quote(t)}" for t in deselect]
    if tests:
        parts += [shlex.quote(t) for t in tests]
    return " ".join(parts)


def runner_of(command: str) -> tuple[Callable[..., str], Callable[[bytes | str], dict[str, TestResult]]]:
    """(how to run the suite writing a report, how to read that report) for a test command: node's
    test runner or tape and miner's reporters' JSON lines, or pytest and its junit XML."""
    if node_runner.is_node_test_command(command):
        return node_runner.suite_command, node_runner.parse_report
    if node_tape.is_tape_command(command):
        return node_tape.suite_command, node_runner.parse_report
    return suite_command, parse_junit


def _script(command: str, report: str, tests: list[str] | None, deselect: list[str], then: str) -> str:
    """The suite, its report printed between markers (and removed), then `then`; exit as the suite."""
    quoted = shlex.quote(report)
    dump = (f"if [ -f {quoted} ] && miner_b64=$(gzip -c {quoted} | base64 -w0) && [ -n \"$miner_b64\" ]; then "
            f"printf '\\n%s\\n%s\\n%s\\n' {REPORT_BEGIN} \"$miner_b64\" {REPORT_END}; rm -f {quoted}; fi")
    more = f"; printf '\\n%s\\n' {THEN_BEGIN}; {then}" if then else ""
    run = runner_of(command)[0](command, report, tests, deselect)
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
        refused = _refused(result.output) if wanted else set()
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
    """What a run reported of one test: its result; under a Node runner, for a test absent from
    the report (or missing) whose file failed before its tests ran, that file's error."""
    found = suite.results.get(test_id)
    if found is not None and found.outcome != "missing":
        return found
    file = test_id.split("::", 1)[0]
    if file != test_id and node_runner.is_node_command(suite.command) and file in suite.results:
        return TestResult(id=test_id, outcome="error", message=suite.results[file].message)
    return found


def _refused(output: str) -> set[str]:
    """Asked-for ids pytest could not collect, made relative to the project again."""
    return {found.removeprefix(PROJECT_DIR + "/") for found in NOT_FOUND.findall(output)}


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
    results = runner_of(command)[1](data) if data else {}
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


# -- junit XML --------------------------------------------------------------------------------


def _module_of(path: str) -> str:
    """How pytest's junit writer turns a file path into a dotted classname prefix."""
    return re.sub(r"\.py$", "", path).replace("/", ".")


def _split_classname(classname: str, file: str | None, modules: dict[str, str]) -> tuple[str, str]:
    """(file path, dotted class path) of a test's classname."""
    if file and (classname == _module_of(file) or classname.startswith(_module_of(file) + ".")):
        return file, classname[len(_module_of(file)) + 1 :]
    # The function is defined elsewhere (an inherited test): use a module seen in this report...
    known = [m for m in modules if classname == m or classname.startswith(m + ".")]
    if known:
        module = max(known, key=len)
        return modules[module], classname[len(module) + 1 :]
    # ...or take the leading lowercase parts as the module and the rest as classes.
    parts = classname.split(".")
    cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    return "/".join(parts[:cut]) + ".py", ".".join(parts[cut:])


def node_id(classname: str, name: str, file: str | None, modules: dict[str, str] | None = None) -> str:
    """The pytest node id of an xunit1 testcase."""
    if not classname:  # a collection error: the name is the module
        return file or name.replace(".", "/") + ".py"
    path, classes = _split_classname(classname, file, modules or {})
    return "::".join([path, *[c for c in classes.split(".") if c], name])


COLLECTION_FAILURE = "collection failure"  # pytest's junit message of a collection error: says nothing


def _message(element: ET.Element) -> str:
    """The first lines of a failure as pytest prints them: its message, or for a collection
    error (whose message is only "collection failure") the exception lines of its report."""
    text = element.get("message") or element.text or ""
    if text == COLLECTION_FAILURE and (element.text or "").strip():
        lines = (element.text or "").splitlines()
        text = "\n".join(line[1:].strip() for line in lines if line.startswith("E ")) or element.text or ""
    lines = text.strip().splitlines()[:MESSAGE_LINES]
    return "\n".join(lines)[:MESSAGE_CHARS]


def _outcome(case: ET.Element) -> tuple[Outcome, str]:
    for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        found = case.find(tag)
        if found is not None:
            return outcome, _message(found)  # type: ignore[return-value]
    return "passed", ""


def parse_junit(data: bytes | str) -> dict[str, TestResult]:
    """TestResults keyed by node id from an xunit1 junit report; {} when it cannot be parsed."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return {}
    cases = list(root.iter("testcase"))
    modules = {}
    for case in cases:
        file, classname = case.get("file"), case.get("classname", "")
        if file and classname and (classname == _module_of(file) or classname.startswith(_module_of(file) + ".")):
            modules[_module_of(file)] = file
    results: dict[str, TestResult] = {}
    for case in cases:
        test_id = node_id(case.get("classname", ""), case.get("name", ""), case.get("file"), modules)
        outcome, message = _outcome(case)
        try:
            duration = float(case.get("time") or 0.0)
        except ValueError:
            duration = 0.0
        results[test_id] = TestResult(id=test_id, outcome=outcome, duration=duration, message=message)
    return results


def outcome_diff(before: dict[str, Outcome], after: dict[str, Outcome]) -> list[tuple[str, Outcome, Outcome]]:
    """(id, old, new) for every test whose outcome changed; a test absent on one side is "missing"."""
    changed = []
    for test_id in sorted(set(before) | set(after)):
        old, new = before.get(test_id, "missing"), after.get(test_id, "missing")
        if old != new:
            changed.append((test_id, old, new))
    return changed
