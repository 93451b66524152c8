"""Node's own test runner (`node --test`) with per-test results from its reporter events.

miner's reporter (reporter.mjs, written beside the report) turns node's test events into one JSON
object a line; nothing is read from the human-readable output. A test's id is its file, relative
to the project, then the names of the suites it is nested in and its own, joined by `::`:

    test/quotes.test.js::the day follows the time zone
    test/api.test.js::routes::GET /quotes answers 200

A run of chosen tests runs their files (node cannot select by id) and keeps the asked-for ones;
a deselected test runs and is dropped. Node >= 18.15 (custom reporters and their destination).

Also here: which command a package's scripts run its tests with (`project_command`: node --test,
or tape, run by miner.ecosystems.node.tape with a reporter of the same JSON lines), and the
command a person runs to see one test.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from importlib import resources
from pathlib import Path, PurePosixPath

from miner.ecosystems.base import ManifestError, Runner
from miner.ecosystems.node import jest, mocha, tape
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


COVERAGE_WRAPPERS = ("nyc", "c8", "istanbul")  # they run the command after their options; miner wants no coverage
ISTANBUL_COMMANDS = ("cover", "test")  # `istanbul cover _mocha -- -R spec`: the program's arguments after `--`
SCRIPT_NAMES = ("test", "tests-only", "test:unit", "unit")
MAX_SCRIPT_HOPS = 5


def read_manifest(root: Path) -> dict | None:
    """package.json as a dict, None when there is none; ManifestError when it does not parse."""
    manifest = Path(root) / "package.json"
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"package.json does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise ManifestError("package.json does not hold an object")
    return data


def _unwrapped(words: list[str]) -> list[str]:
    """A command without its coverage wrapper (`nyc --reporter=text tape x` -> `tape x`)."""
    while words and PurePosixPath(words[0]).name in COVERAGE_WRAPPERS:
        istanbul = PurePosixPath(words[0]).name == "istanbul"
        words = words[1:]
        while words and (words[0].startswith("-") or (istanbul and words[0] in ISTANBUL_COMMANDS)):
            words = words[1:]
        if istanbul and "--" in words:
            words = [*words[:words.index("--")], *words[words.index("--") + 1:]]
    return words


def _script_runs(scripts: dict, command: str, hops: int = 0) -> list[list[str]]:
    """The commands one script runs (`a && b`), `npm run X` followed into script X."""
    runs = []
    for part in re.split(r"\s*(?:&&|;)\s*", command):
        try:
            words = _unwrapped(shlex.split(part))
        except ValueError:
            continue
        if words[:2] == ["npm", "run"] or words[:1] == ["npm-run-posix-or-windows"]:
            name = next((w for w in words[1:] if w != "run" and not w.startswith("-")), "")
            if hops < MAX_SCRIPT_HOPS and isinstance(scripts.get(name), str):
                runs += _script_runs(scripts, scripts[name], hops + 1)
        elif words:
            runs.append(words)
    return runs


def _test_file(root: Path, argument: str) -> str | None:
    """What `node ARG` runs as node resolves it: the file, ARG.js or ARG/index.js."""
    for candidate in (argument, f"{argument}.js", f"{argument}/index.js"):
        if (Path(root) / candidate).is_file():
            return str(PurePosixPath(candidate))
    return None


def _as_runner(root: Path, words: list[str], dev: dict) -> str | None:
    """One script command as a command miner runs: node --test, or tape (also `node FILE` of a
    package whose dev dependencies have tape: its test files are tape's)."""
    program = PurePosixPath(words[0]).name
    if program in ("node", "nodejs") and "--test" in words:
        return shlex.join(words)
    if program == "tape" or (program == "npx" and "tape" in words):
        return shlex.join(["tape", *words[words.index("tape") + 1:]])
    if program in ("node", "nodejs") and "tape" in dev and len(words) == 2 and not words[1].startswith("-"):
        file = _test_file(root, words[1])
        return shlex.join(["tape", file]) if file else None
    if program in mocha.PROGRAMS or (program == "npx" and any(w in mocha.PROGRAMS for w in words)):
        return mocha.normalise(root, words)
    if program == jest.PROGRAM or (program == "npx" and jest.PROGRAM in words):
        return None if jest.config_problem(root, words) else jest.normalise(root, words)
    return None


def project_command(root: Path) -> str | None:
    """The project's own test command as miner runs it: package.json's test script (followed
    through `npm run`, coverage wrappers left out) when it runs node's test runner or tape; None
    when there is no package.json or its tests run otherwise; ManifestError when package.json does
    not parse."""
    data = read_manifest(root)
    if data is None:
        return None
    scripts = data.get("scripts") if isinstance(data.get("scripts"), dict) else {}
    dev = data.get("devDependencies") if isinstance(data.get("devDependencies"), dict) else {}
    for name in SCRIPT_NAMES:
        if isinstance(scripts.get(name), str):
            for words in _script_runs(scripts, scripts[name]):
                if command := _as_runner(root, words, dev):
                    return command
    return None


def command_files(command: str) -> list[str]:
    """The file and glob arguments of a Node test command (tape's, mocha's or node --test's)."""
    if jest.is_jest_command(command):
        return jest.command_files(command)
    if mocha.is_mocha_command(command):
        return mocha.command_files(command)
    return tape.split_command(command)[1] if tape.is_tape_command(command) else split_command(command)[2]


def _jest_problem(root: Path, scripts: dict) -> str | None:
    """Why a test script's jest run is not read (its config is code, or transforms), else None."""
    runs = [words for name in SCRIPT_NAMES if isinstance(scripts.get(name), str)
            for words in _script_runs(scripts, scripts[name])]
    return next((why for words in runs if jest.PROGRAM in [PurePosixPath(w).name for w in words[:2]]
                 and (why := jest.config_problem(root, words))), None)


def suite_problem(root: Path) -> str | None:
    """Why the project's tests cannot run under a Node runner miner reads (None when they can):
    no package.json, one that does not parse, a test script miner does not read, test files absent."""
    try:
        data = read_manifest(root)
        command = project_command(root)
    except ManifestError as exc:
        return str(exc)
    if data is None:
        return "no package.json"
    if command is None:
        scripts = data.get("scripts") if isinstance(data.get("scripts"), dict) else {}
        if why := _jest_problem(root, scripts):
            return why
        return f"its test script runs no test runner miner reads (node --test, tape, mocha, jest): {scripts.get('test')!r}"
    files = command_files(command)
    patterns = files or ["**/*.test.js", "**/*.test.mjs", "**/*.test.cjs", "test/**/*.js", "test/**/*.mjs"]
    if not any(path.is_file() and "node_modules" not in path.parts
               for pattern in patterns for path in Path(root).glob(pattern)):
        return f"it ships no test files ({' '.join(patterns)} match nothing)"
    return None


def check_command(command: str, test_id: str) -> str:
    """The command a person runs to see one of node --test's tests: its file, its name as node's
    name pattern."""
    node, options, _ = split_command(command)
    file, _, rest = test_id.partition(ID_SEPARATOR)
    name = rest.rsplit(ID_SEPARATOR, 1)[-1] if rest else ""
    escaped = JS_SPECIAL.sub(lambda m: "\\" + m.group(0), name)
    pattern = [f"--test-name-pattern=^{escaped}$"] if name else []
    return shlex.join([node, *options, *pattern, file])


# the closing counts, as node's TAP reporter ("# pass 1"), its spec reporter ("ℹ pass 1") and tape
# ("# pass  1") print them
PASS_COUNT = re.compile(r"^(?:#|ℹ) pass\s+([0-9]+)\s*$", re.MULTILINE)
FAIL_COUNT = re.compile(r"^(?:#|ℹ) fail\s+([0-9]+)\s*$", re.MULTILINE)


def run_passed(exit_code: int, output: str) -> bool:
    """Whether a person's run of check_command passed: node exited 0, counting a passed test and
    no failed one (a test its name pattern leaves out is counted as skipped)."""
    passed, failed = PASS_COUNT.findall(output), FAIL_COUNT.findall(output)
    return exit_code == 0 and bool(passed) and int(passed[-1]) > 0 and not (failed and int(failed[-1]))


def _node_verifier_spec(command: str) -> dict:
    return {"runner": "node", "node_args": split_command(command)[1], "pytest_args": []}


def _tape_verifier_spec(command: str) -> dict:
    return {"runner": "tape", "tape_preload": tape.split_command(command)[0], "pytest_args": []}


RUNTIME = "The project runs on the system's Node.js (`node`)."


def printed_forms(line: str) -> list[str]:
    """A reported line as printed (node's console names an assertion's class apart: "AssertionError
    [ERR_ASSERTION]: ..."), and as node's TAP reporter quotes it (inside a YAML string, its
    backslashes doubled)."""
    line = line.removeprefix("AssertionError: ")
    return [line, line.replace("\\", "\\\\")]


NODE_TEST = Runner(
    name="node --test", language="Node.js", runtime=RUNTIME, claims=is_node_test_command,
    suite_command=suite_command, parse_report=parse_report, check_command=check_command,
    run_passed=lambda code, output, healthy_outcome="passed": run_passed(code, output),
    verifier_spec=_node_verifier_spec, file_errors_stand_for_tests=True, printed_forms=printed_forms,
    verifier_files=(("node_reporter.mjs", reporter_source),),
)
TAPE = Runner(
    name="tape", language="Node.js", runtime=RUNTIME, claims=tape.is_tape_command,
    suite_command=tape.suite_command, parse_report=parse_report, check_command=tape.check_command,
    run_passed=NODE_TEST.run_passed, verifier_spec=_tape_verifier_spec, file_errors_stand_for_tests=True,
    printed_forms=printed_forms, verifier_files=(("tape_reporter.cjs", tape.reporter_source),),
)
MOCHA = Runner(
    name="mocha", language="Node.js", runtime=RUNTIME, claims=mocha.is_mocha_command,
    suite_command=mocha.suite_command, parse_report=parse_report, check_command=mocha.check_command,
    run_passed=mocha.run_passed, verifier_spec=mocha.verifier_spec, file_errors_stand_for_tests=True,
    verifier_files=(("mocha_reporter.cjs", mocha.reporter_source),), collect_reads=mocha.CONFIG_FILES,
)
JEST = Runner(
    name="jest", language="Node.js", runtime=RUNTIME, claims=jest.is_jest_command,
    suite_command=jest.suite_command, parse_report=lambda data: parse_report(jest.report_lines(data)),
    check_command=jest.check_command, run_passed=jest.run_passed, verifier_spec=jest.verifier_spec,
    file_errors_stand_for_tests=True, printed_forms=jest.printed_forms, collect_reads=jest.CONFIG_FILES,
)
RUNNERS = (NODE_TEST, TAPE, MOCHA, JEST)
