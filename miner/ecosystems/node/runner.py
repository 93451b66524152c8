"""Node's own test runner (`node --test`) with per-test results from its reporter events.

miner's reporter (reporter.mjs, written beside the report) turns node's test events into one JSON
object a line; nothing is read from the human-readable output. A test's id is its file, relative
to the project, then the names of the suites it is nested in and its own, joined by `::`:

    test/quotes.test.js::the day follows the time zone
    test/api.test.js::routes::GET /quotes answers 200

A run of chosen tests runs their files (node cannot select by id) and keeps the asked-for ones;
a deselected test runs and is dropped. Node >= 18.15 (custom reporters and their destination).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from importlib import resources
from pathlib import Path, PurePosixPath

from miner.models import PROJECT_DIR, TestResult

MESSAGE_CHARS = 1000
JS_SPECIAL = re.compile(r"[.*+?^${}()|[\]\\]")  # what a JavaScript regular expression escapes
ID_SEPARATOR = "::"


def is_node_test_command(command: str) -> bool:
    """A command node's test runner serves: `node … --test …`."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return bool(words) and PurePosixPath(words[0]).name in ("node", "nodejs") and "--test" in words


def reporter_source() -> bytes:
    return resources.files("miner.ecosystems.node").joinpath("reporter.mjs").read_bytes()


def split_command(command: str) -> tuple[str, list[str], list[str]]:
    """(the node program, its options, its file and folder arguments) of a node --test command."""
    words = shlex.split(command)
    return words[0], [w for w in words[1:] if w.startswith("-")], [w for w in words[1:] if not w.startswith("-")]


def suite_command(command: str, report: str, tests: list[str] | None = None, deselect: list[str] = ()) -> str:
    """The shell command running `command` (a node --test command) with miner's reporter writing
    `report`, over the files of `tests` when given (a deselected test is dropped when parsed)."""
    node, options, files = split_command(command)
    reporter = f"{report}.reporter.mjs"
    if tests:
        files = sorted({t.split(ID_SEPARATOR, 1)[0] for t in tests})
    write = f"echo {base64.b64encode(reporter_source()).decode()} | base64 -d > {shlex.quote(reporter)}"
    run = shlex.join([node, *options, f"--test-reporter={reporter}",
                      f"--test-reporter-destination={report}", *files])
    return f"{write} && {run}; miner_node_rc=$?; rm -f {shlex.quote(reporter)}; (exit $miner_node_rc)"


def _relative(file: str | None) -> str:
    if not file:
        return "<no file>"
    path = PurePosixPath(file)
    return str(path.relative_to(PROJECT_DIR)) if path.is_relative_to(PROJECT_DIR) else file.lstrip("/")


def _outcome(event: dict) -> str:
    if event.get("skip") or event.get("todo"):
        return "skipped"
    if event.get("passed"):
        return "passed"
    # a file that failed before any test of it ran (a require that threw) is the file's own event
    return "error" if len(event.get("names") or []) == 1 and event["names"][0] == event.get("file") else "failed"


def parse_report(data: bytes | str) -> dict[str, TestResult]:
    """TestResults keyed by test id from the reporter's JSON lines (suites left out); a line that
    does not parse is skipped."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    results: dict[str, TestResult] = {}
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("kind") == "suite" or not event.get("names"):
            continue
        file = _relative(event.get("file"))
        names = [n for n in event["names"] if n != event.get("file")]
        test_id = ID_SEPARATOR.join([file, *names])
        outcome = _outcome(event)
        results[test_id] = TestResult(id=test_id, outcome=outcome, duration=float(event.get("duration_ms") or 0) / 1000,
                                      message=str(event.get("message") or "")[:MESSAGE_CHARS] if outcome != "passed" else "")
    return results


class ManifestError(ValueError):
    """A package.json that does not parse."""


def project_command(root: Path) -> str | None:
    """The project's own node --test command (package.json's `scripts.test`), or None when it
    has no package.json or its tests run otherwise; ManifestError when package.json does not parse."""
    manifest = Path(root) / "package.json"
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"package.json does not parse: {exc}") from exc
    script = ((data.get("scripts") or {}) if isinstance(data, dict) else {}).get("test")
    return script if isinstance(script, str) and is_node_test_command(script) else None


def check_command(command: str, test_id: str) -> str:
    """The command a person runs to see one test: its file, its name as node's name pattern."""
    node, options, _ = split_command(command)
    file, _, rest = test_id.partition(ID_SEPARATOR)
    name = rest.rsplit(ID_SEPARATOR, 1)[-1] if rest else ""
    escaped = JS_SPECIAL.sub(lambda m: "\\" + m.group(0), name)
    pattern = [f"--test-name-pattern=^{escaped}$"] if name else []
    return shlex.join([node, *options, *pattern, file])


# node's closing counts, as its TAP reporter ("# pass 1") and its spec reporter ("ℹ pass 1") print them
PASS_COUNT = re.compile(r"^(?:#|ℹ) pass ([0-9]+)\s*$", re.MULTILINE)
FAIL_COUNT = re.compile(r"^(?:#|ℹ) fail ([0-9]+)\s*$", re.MULTILINE)


def run_passed(exit_code: int, output: str) -> bool:
    """Whether a person's run of check_command passed: node exited 0, counting a passed test and
    no failed one (a test its name pattern leaves out is counted as skipped)."""
    passed, failed = PASS_COUNT.findall(output), FAIL_COUNT.findall(output)
    return exit_code == 0 and bool(passed) and int(passed[-1]) > 0 and not (failed and int(failed[-1]))
