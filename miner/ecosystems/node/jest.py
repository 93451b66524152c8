"""jest with per-test results from jest's own JSON report (`--json --outputFile`), never its console.

A jest command is what a package's scripts run (`jest …`, `npx jest`, behind nyc/c8 and `npm run`),
normalised to

    jest --ci [--config 'JSON'] [PATTERNS...]

where JSON is the project's jest configuration as far as it is data: package.json's "jest" key or
a jest.config.json (or the JSON file a script's --config names), merged with the script's own
options, and only the keys of CONFIG_KEYS (where tests are and how they load modules). A
jest.config.js/.ts/.mjs/.cjs is code: miner does not run it to learn the config, so such a project
is not read (suite_problem says why). Neither is one whose config transforms its files (`preset`,
`transform`): miner runs jest with no transform, so no babel config is read either.

The suite runs as `jest --ci --no-cache --watchman=false --config JSON --json --outputFile=REPORT`:
the config always explicit, so a config file or package.json key the project gains later, or
jest's cache, cannot change what runs. The report is jest's own (testResults[].assertionResults[]);
report_lines turns it into the JSON lines of node's reporter (miner.ecosystems.node.runner reads
them), a file that failed before its tests ran as one entry for the file with jest's first error
line. A test's id is its file, its describe blocks' titles and its own:

    test/dates.test.js::dates::notice::goes out days before the release

The Runner record (JEST) sits in miner.ecosystems.node.runner beside the other Node runners.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path, PurePosixPath

from miner.ecosystems.node import commands
from miner.models import PROJECT_DIR

ID_SEPARATOR = "::"
PROGRAM = "jest"
MESSAGE_CHARS = 1000
# jest's config files, in the order it looks for them; only the .json one is data
CONFIG_FILES = ("jest.config.js", "jest.config.ts", "jest.config.mjs", "jest.config.cjs", "jest.config.json")
CODE_CONFIGS = CONFIG_FILES[:4]
# what miner keeps of a config: where the tests are, how their modules resolve, how they run
CONFIG_KEYS = ("testMatch", "testRegex", "testPathIgnorePatterns", "roots", "moduleFileExtensions", "testEnvironment",
               "setupFiles", "setupFilesAfterEnv", "moduleNameMapper", "moduleDirectories", "modulePaths",
               "modulePathIgnorePatterns", "testTimeout", "clearMocks", "resetMocks", "restoreMocks", "resetModules",
               "injectGlobals", "globals", "fakeTimers", "timers")
TRANSFORMING = ("preset", "transform")  # a config miner cannot honour without running the project's code
# script options miner keeps (option -> config key; a list-valued key takes each occurrence)
KEPT = {"--testMatch": "testMatch", "--testRegex": "testRegex", "--roots": "roots",
        "--testPathIgnorePatterns": "testPathIgnorePatterns", "--setupFiles": "setupFiles",
        "--setupFilesAfterEnv": "setupFilesAfterEnv", "--testEnvironment": "testEnvironment", "--env": "testEnvironment",
        "--testTimeout": "testTimeout", "--moduleDirectories": "moduleDirectories",
        "--moduleFileExtensions": "moduleFileExtensions", "--modulePaths": "modulePaths"}
LIST_KEYS = {"testMatch", "roots", "testPathIgnorePatterns", "setupFiles", "setupFilesAfterEnv", "moduleDirectories",
             "moduleFileExtensions", "modulePaths"}
# options dropped whose next word is their value
VALUED = {"-c", "--config", "-w", "--maxWorkers", "--reporters", "--coverageReporters", "--coverageDirectory",
          "--collectCoverageFrom", "--outputFile", "-t", "--testNamePattern", "--testPathPattern",
          "--testPathPatterns", "--selectProjects", "--shard", "--seed", "--testSequencer", "--cacheDirectory",
          "--coverageProvider", "--coveragePathIgnorePatterns", "--changedSince", "--testResultsProcessor",
          "--rootDir", "--projects", "--maxConcurrency", "--workerIdleMemoryLimit", "--logHeapUsage", "--preset",
          "--transform", "--resolver", "--testRunner", "--globalSetup", "--globalTeardown"}
# the flags every run miner makes carries (the report's own come after)
RUN_FLAGS = ["--ci", "--no-cache", "--watchman=false", "--forceExit", "--maxWorkers=2"]
DEFAULT_FILES = ["**/__tests__/**/*.js", "**/*.test.js", "**/*.spec.js", "**/*.test.cjs", "**/*.spec.cjs",
                 "**/*.test.mjs", "**/*.spec.mjs"]
JS_SPECIAL = re.compile(r"[.*+?^${}()|[\]\\]")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TESTS_LINE = re.compile(r"^Tests:\s+(.*)$", re.MULTILINE)


def is_jest_command(command: str) -> bool:
    """`jest …` or `npx jest …`."""
    return commands.program(command) == PROGRAM


def _options(words: list[str]) -> tuple[dict, list[str], str | None]:
    """(the config keys the script's options set, its positional patterns, the --config it names)."""
    config: dict = {}
    patterns: list[str] = []
    named = None
    it = iter(words)
    for word in it:
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in KEPT:
            value = inline if eq else next(it, "")
            key = KEPT[name]
            config[key] = [*config.get(key, []), value] if key in LIST_KEYS else value
        elif name in ("-c", "--config"):
            named = inline if eq else next(it, None)
        elif name in VALUED:
            if not eq:
                next(it, "")
        elif not word.startswith("-"):
            patterns.append(word)
    if "testTimeout" in config and str(config["testTimeout"]).isdigit():
        config["testTimeout"] = int(config["testTimeout"])
    return config, patterns, named


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def config_source(root: Path, named: str | None = None) -> tuple[dict | None, str | None]:
    """(the project's jest config as data, why it cannot be read): a --config file the script
    names, else jest.config.* (a code one is not read), else package.json's "jest" key."""
    root = Path(root)
    if named:
        if not named.endswith(".json"):
            return None, f"its jest config {named} is code (miner does not run it to read it)"
        data = _read_json(root / named)
        return (data, None) if isinstance(data, dict) else (None, f"its jest config {named} does not parse")
    if code := next((n for n in CODE_CONFIGS if (root / n).is_file()), None):
        return None, f"its jest config {code} is code (miner does not run it to read it)"
    if (root / "jest.config.json").is_file():
        data = _read_json(root / "jest.config.json")
        return (data, None) if isinstance(data, dict) else (None, "its jest.config.json does not parse")
    manifest = _read_json(root / "package.json")
    found = manifest.get("jest") if isinstance(manifest, dict) else None
    return (found if isinstance(found, dict) else {}), None


def config_problem(root: Path, words: list[str]) -> str | None:
    """Why a script's jest run cannot be read (a config that is code, or one that transforms files)."""
    config, problem = config_source(root, _options(words)[2])
    if problem:
        return problem
    if used := [k for k in TRANSFORMING if k in (config or {})]:
        return f"its jest config transforms the test files ({', '.join(used)}): miner runs jest without transforms"
    return None


def normalise(root: Path, words: list[str]) -> str:
    """A script's jest command (`words` from the program on) as miner runs it (see the module)."""
    start = next(i for i, w in enumerate(words) if PurePosixPath(w).name == PROGRAM)
    script, patterns, named = _options(words[start + 1:])
    project, _ = config_source(root, named)
    config = {k: v for k, v in (project or {}).items() if k in CONFIG_KEYS} | script
    argv = ["jest", "--ci", *(["--config", json.dumps(config, sort_keys=True, separators=(",", ":"))] if config else [])]
    return shlex.join([*argv, *patterns])


def split_command(command: str) -> tuple[dict, list[str]]:
    """(the config a normalised jest command carries, its patterns)."""
    words = shlex.split(command)
    words = words[words.index(PROGRAM) + 1:] if PROGRAM in words else words[1:]
    config: dict = {}
    patterns: list[str] = []
    it = iter(words)
    for word in it:
        if word in ("-c", "--config") or word.startswith("--config="):
            text = word.partition("=")[2] if "=" in word else next(it, "{}")
            try:
                config = json.loads(text)
            except ValueError:
                config = {}
        elif not word.startswith("-"):
            patterns.append(word)
    return (config if isinstance(config, dict) else {}), patterns


def run_argv(config: dict, report: str, files: list[str], patterns: list[str]) -> list[str]:
    """jest's arguments (after the program) for one run writing its JSON report to `report`:
    the files by path when given, else the patterns."""
    chosen = ["--runTestsByPath", *files] if files else patterns
    return [*RUN_FLAGS, "--config", json.dumps(config, sort_keys=True, separators=(",", ":")), "--json",
            f"--outputFile={report}", *chosen]


def suite_command(command: str, report: str, tests: list[str] | None = None, deselect: list[str] = ()) -> str:
    """The shell command running the jest suite (or the files of `tests`) writing jest's JSON
    report to `report`, jest's cache in a folder of its own beside it, removed after."""
    config, patterns = split_command(command)
    cache = f"{report}.jest-cache"
    files = sorted({t.split(ID_SEPARATOR, 1)[0] for t in tests}) if tests else []
    run = shlex.join(["jest", *run_argv({**config, "cacheDirectory": cache}, report, files, patterns)])
    return f"{run}; miner_jest_rc=$?; rm -rf {shlex.quote(cache)}; (exit $miner_jest_rc)"


def _relative(name: str, root: str) -> str:
    path = PurePosixPath(name)
    return str(path.relative_to(root)) if path.is_relative_to(root) else name.lstrip("/")


def first_error_line(text: str) -> str:
    """The first line jest prints of an error: not its "● Test suite failed to run" header."""
    for line in ANSI.sub("", text or "").splitlines():
        line = line.strip()
        if line and not line.startswith("●"):
            return line[:MESSAGE_CHARS]
    return ""


def _status(status: str) -> dict:
    return {"passed": status == "passed", "skip": status in ("pending", "skipped", "disabled"),
            "todo": status == "todo"}


def report_entries(data: bytes | str, root: str = PROJECT_DIR) -> list[dict]:
    """jest's JSON report as node reporter entries: one a test, and one for a file that failed
    before any of its tests ran (names: [file], jest's first error line); [] when it does not parse."""
    try:
        report = json.loads(data)
    except ValueError:
        return []
    entries = []
    for suite in report.get("testResults") or [] if isinstance(report, dict) else []:
        file = _relative(str(suite.get("name") or "<no file>"), root)
        tests = suite.get("assertionResults") or []
        if not tests and suite.get("status") == "failed":
            error = (suite.get("testExecError") or {}).get("message") or suite.get("message") or "jest failed the file"
            entries.append({"file": file, "names": [file], "passed": False, "message": first_error_line(error)})
        for test in tests:
            names = [file, *map(str, test.get("ancestorTitles") or []), str(test.get("title"))]
            failures = test.get("failureMessages") or []
            entries.append({"file": file, "names": names, **_status(str(test.get("status"))),
                            "duration_ms": test.get("duration") or 0,
                            "message": first_error_line(failures[0]) if failures else ""})
    return entries


def report_lines(data: bytes | str, root: str = PROJECT_DIR) -> str:
    """report_entries as the JSON lines node's reporter writes."""
    return "".join(json.dumps(entry) + "\n" for entry in report_entries(data, root))


def check_command(command: str, test_id: str) -> str:
    """The command a person runs to see one test: jest on its file (the project's own config, the
    same data miner read), its full name (describe titles and its own, joined by spaces) as -t."""
    file, _, rest = test_id.partition(ID_SEPARATOR)
    name = " ".join(rest.split(ID_SEPARATOR)) if rest else ""
    pattern = ["-t", "^" + JS_SPECIAL.sub(lambda m: "\\" + m.group(0), name) + "$"] if name else []
    return shlex.join(["jest", *pattern, file])


def run_passed(exit_code: int, output: str, healthy_outcome: str = "passed") -> bool:
    """Whether a person's run of check_command passed: jest exited 0 (it exits 1 on any failure,
    a file that did not load included) and, as its closing "Tests:" line counts, a test passed (a
    -t that matched none exits 0 with every test skipped)."""
    if exit_code != 0:
        return False
    counts = TESTS_LINE.findall(ANSI.sub("", output))
    return not counts or bool(re.search(r"\b[1-9][0-9]* passed\b", counts[-1]))


def printed_forms(line: str) -> list[str]:
    """A reported line as jest prints it: a failed expectation without the "Error: " its report adds."""
    return list(dict.fromkeys([line.removeprefix("Error: "), line]))


def verifier_spec(command: str) -> dict:
    return {"runner": "jest", "jest_config": split_command(command)[0], "pytest_args": []}


def command_files(command: str) -> list[str]:
    """Glob patterns of the files the jest command runs: its testMatch globs when they are plain
    ones, a pattern naming a folder or file as that folder's test files, else jest's defaults."""
    config, patterns = split_command(command)
    globs = [g for g in config.get("testMatch") or [] if isinstance(g, str) and not re.search(r"[!?+@]\(|\{", g)]
    globs = [g.removeprefix("<rootDir>/").removeprefix("./") for g in globs]
    if patterns and all(re.fullmatch(r"[\w./-]+", p) for p in patterns):
        return [f for p in patterns for f in ((p,) if p.endswith((".js", ".cjs", ".mjs")) else
                                              (f"{p.rstrip('/')}/**/{g.removeprefix('**/')}" for g in globs or DEFAULT_FILES))]
    return globs or DEFAULT_FILES
