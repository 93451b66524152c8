"""mocha with per-test results from its reporter API, never from its console text.

A mocha command is what a package's scripts run, normalised to

    mocha [--require M]... [--ui X] [--timeout N] [--recursive] FILES...

(FILES may be globs or folders, as mocha takes them; none given: mocha's default, `test`). The
project's mocha configuration is read where it is data: `.mocharc.json`, `.mocharc.yaml`,
`.mocharc.yml`, package.json's "mocha" key and `test/mocha.opts`, for spec, require, ui, timeout and
recursive alone. Not read: `.mocharc.js`/`.mocharc.cjs` (code), `.mocharc.jsonc` unless it is plain
JSON, and every other option (reporter, grep, extension, ignore, file, parallel, retries).

miner runs each test file in its own node process through its reporter (mocha-reporter.cjs, written
beside the report), which runs mocha's command line on the file with itself as mocha's reporter and
the project's config files unread (`--no-config --no-package`, `--no-opts` where mocha has it), and
writes the same JSON lines as node's reporter, so miner.ecosystems.node.runner.parse_report reads
them. A test's id is its file, its suites' titles and its own:

    test/parse.spec.js::parse()::parses a simple string

The Runner record (MOCHA) sits in miner.ecosystems.node.runner beside node --test's and tape's.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import resources
from pathlib import Path, PurePosixPath

import yaml

from miner.ecosystems.node import commands, tape

ID_SEPARATOR = "::"
PROGRAMS = ("mocha", "_mocha")
DEFAULT_SPEC = "test"
SUFFIXES = (".js", ".cjs", ".mjs")  # the files mocha takes from a folder
BUILTIN_UIS = ("bdd", "tdd", "qunit", "exports")
# mocha reads these when it starts, in the project folder (mocha.opts: in test/, before mocha 8)
CONFIG_FILES = (".mocharc.cjs", ".mocharc.js", ".mocharc.yaml", ".mocharc.yml", ".mocharc.jsonc", ".mocharc.json",
                "mocha.opts")
# options whose next word is their value (the ones miner keeps, then the ones it drops)
KEPT = {"-r": "require", "--require": "require", "-u": "ui", "--ui": "ui", "-t": "timeout", "--timeout": "timeout",
        "--spec": "spec", "--config": "config"}
VALUED = {"-R", "--reporter", "-O", "--reporter-option", "--reporter-options", "-g", "--grep", "-f", "--fgrep",
          "--extension", "-s", "--slow", "--retries", "--globals", "--opts", "--package", "--file", "--ignore",
          "--exclude", "-j", "--jobs", "-n", "--node-option", "--compilers", "--watch-files", "--watch-ignore"}
JS_SPECIAL = re.compile(r"[.*+?^${}()|[\]\\]")
PASSING = re.compile(r"^\s*([0-9]+) passing\b", re.MULTILINE)
NOT_PASSING = re.compile(r"^\s*([0-9]+) (?:failing|pending)\b", re.MULTILINE)
TAP_PASS, TAP_NOT = re.compile(r"^# pass ([0-9]+)\s*$", re.MULTILINE), re.compile(r"^# fail ([0-9]+)\s*$", re.MULTILINE)


def is_mocha_command(command: str) -> bool:
    """`mocha …`, `_mocha …` or `npx mocha …`."""
    return commands.program(command) in PROGRAMS


def _options(words: list[str]) -> dict:
    """What miner keeps of mocha's arguments: {"require": [...], "ui", "timeout", "recursive",
    "spec": [...], "config"}."""
    found: dict = {"require": [], "spec": []}
    it = iter(words)
    for word in it:
        name, _, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in KEPT:
            value = inline or next(it, "")
            key = KEPT[name]
            found[key] = [*found[key], value] if key in ("require", "spec") else value
        elif name in VALUED:
            if not inline:
                next(it, "")
        elif name in ("--no-timeout", "--no-timeouts"):
            found["timeout"] = "0"
        elif name == "--recursive":
            found["recursive"] = True
        elif not word.startswith("-"):
            found["spec"].append(word)
    return found


def _as_list(value: object) -> list[str]:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return [str(value)]
    return [str(v) for v in value] if isinstance(value, list) else []


def _from_data(data: object) -> dict:
    """The options miner keeps from a config file's or package.json's mapping."""
    if not isinstance(data, dict):
        return {}
    found: dict = {"require": _as_list(data.get("require")), "spec": _as_list(data.get("spec"))}
    for key in ("ui", "timeout"):
        if isinstance(data.get(key), (str, int)) and not isinstance(data.get(key), bool):
            found[key] = str(data[key])
    if data.get("timeout") is False or data.get("timeouts") is False or data.get("no-timeouts") is True:
        found["timeout"] = "0"
    if data.get("recursive") is True:
        found["recursive"] = True
    return found


def _read_data(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix in (".json", ".jsonc") else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError):
        return None


def config_options(root: Path, named: str | None = None) -> list[dict]:
    """The options of the project's mocha configuration miner reads, weakest first: test/mocha.opts,
    package.json's "mocha" key, then the config file (`named`, else the first of mocha's names found)."""
    root = Path(root)
    layers = []
    opts = root / "test" / "mocha.opts"
    if opts.is_file():
        try:
            layers.append(_options(shlex.split(opts.read_text(encoding="utf-8"), comments=True)))
        except (OSError, UnicodeDecodeError, ValueError):
            pass
    manifest = _read_data(root / "package.json")
    layers.append(_from_data(manifest.get("mocha") if isinstance(manifest, dict) else None))
    first = named or next((n for n in CONFIG_FILES if (root / n).is_file()), None)
    if first and (root / first).suffix in (".json", ".jsonc", ".yaml", ".yml"):
        layers.append(_from_data(_read_data(root / first)))
    return layers


def normalise(root: Path, words: list[str]) -> str:
    """A script's mocha command (`words` from the program on) as miner runs it (see the module)."""
    start = next(i for i, w in enumerate(words) if PurePosixPath(w).name in PROGRAMS)
    script = _options(words[start + 1:])
    merged: dict = {"require": [], "spec": []}
    for layer in [*config_options(root, script.get("config")), script]:
        for key, value in layer.items():
            if key == "require":
                merged["require"] = [*merged["require"], *value]
            elif key == "spec":
                merged["spec"] = value or merged["spec"]
            else:
                merged[key] = value
    argv = ["mocha", *[w for r in dict.fromkeys(merged["require"]) for w in ("--require", r)]]
    argv += [w for key in ("ui", "timeout") if merged.get(key) for w in (f"--{key}", merged[key])]
    argv += ["--recursive"] if merged.get("recursive") else []
    return shlex.join([*argv, *(merged["spec"] or [DEFAULT_SPEC])])


def split_command(command: str) -> tuple[list[str], list[str], bool]:
    """(mocha's options miner passes on, its file, folder and glob arguments (mocha's default
    when none), whether --recursive)."""
    found = _options(shlex.split(command)[1:])
    options = [w for r in found["require"] for w in ("--require", r)]
    options += [w for key in ("ui", "timeout") if found.get(key) for w in (f"--{key}", found[key])]
    return options, found["spec"] or [DEFAULT_SPEC], bool(found.get("recursive"))


def reporter_source() -> bytes:
    return resources.files("miner.ecosystems.node").joinpath("mocha-reporter.cjs").read_bytes()


def _listing(recursive: bool) -> str:
    """bash listing the test files of mocha's arguments: a folder's .js/.cjs/.mjs files (its whole
    tree with --recursive), a file or a glob's files as they are."""
    inside = '"$miner_a"/**/*.{js,cjs,mjs}' if recursive else '"$miner_a"/*.{js,cjs,mjs}'
    return (f"for miner_a in {{words}}; do if [ -d \"$miner_a\" ]; then printf '%s\\n' {inside}; "
            "else printf '%s\\n' \"$miner_a\"; fi; done")


def suite_command(command: str, report: str, tests: list[str] | None = None, deselect: list[str] = ()) -> str:
    """The shell command running the mocha suite (or the files of `tests`) file by file under
    miner's reporter, which appends to `report`; exit 1 when any file's run failed."""
    options, files, recursive = split_command(command)
    if tests:
        files = sorted({t.split(ID_SEPARATOR, 1)[0] for t in tests})
    return tape.file_by_file(report, "mocha-reporter.cjs", reporter_source(), files, options, _listing(recursive))


def check_command(command: str, test_id: str) -> str:
    """The command a person runs to see one test: mocha on its file, its full title as an anchored
    --grep (mocha joins a test's suite titles and its own with spaces)."""
    options, _, _ = split_command(command)
    file, _, rest = test_id.partition(ID_SEPARATOR)
    title = " ".join(rest.split(ID_SEPARATOR)) if rest else ""
    grep = ["--grep", "^" + JS_SPECIAL.sub(lambda m: "\\" + m.group(0), title) + "$"] if title else []
    return shlex.join(["mocha", *options, *grep, file])


def run_passed(exit_code: int, output: str, healthy_outcome: str = "passed") -> bool:
    """Whether a person's run of check_command passed: mocha exited 0 (its exit code counts the
    failures) and ran a test that passed. The exit code alone cannot tell a passed test from one
    skipped or from a grep that matched none, so the run's closing counts say which: "N passing"
    and no failing or pending one (mocha's console reporters), or TAP's "# pass N"."""
    if exit_code != 0:
        return False
    passing, tap = PASSING.findall(output), TAP_PASS.findall(output)
    if passing:
        return int(passing[-1]) > 0 and not any(int(n) for n in NOT_PASSING.findall(output))
    return bool(tap) and int(tap[-1]) > 0 and not any(int(n) for n in TAP_NOT.findall(output))


def verifier_spec(command: str) -> dict:
    return {"runner": "mocha", "mocha_args": split_command(command)[0], "pytest_args": []}


def command_files(command: str) -> list[str]:
    """The glob patterns of the files a mocha command loads: its test files (a folder: its
    .js/.cjs/.mjs files, its whole tree with --recursive) and the project files it --requires."""
    _, spec, recursive = split_command(command)
    inside = "**/*" if recursive else "*"
    tests = [pattern for arg in spec for pattern in (arg, *(() if arg.endswith(SUFFIXES) else
                                                            (f"{arg.rstrip('/')}/{inside}{ext}" for ext in SUFFIXES)))]
    found = _options(shlex.split(command)[1:])
    return [*tests, *(str(PurePosixPath(r)) for r in found["require"] if _is_file(r))]


def _is_file(module: str) -> bool:
    """Whether a --require names a project file (mocha requires a path that exists as one)."""
    return module.startswith((".", "/")) or module.endswith(SUFFIXES)


def preloaded_packages(command: str) -> set[str]:
    """The packages a mocha command loads before the tests: its --require modules and an --ui
    interface that is not mocha's own (`--ui mocha-qunit-ui`, `--require should`)."""
    found = _options(shlex.split(command)[1:])
    names = [r for r in found["require"] if not _is_file(r)]
    names += [found["ui"]] if found.get("ui") and found["ui"] not in BUILTIN_UIS else []
    return {"/".join(n.split("/")[:2]) if n.startswith("@") else n.split("/")[0] for n in names}
