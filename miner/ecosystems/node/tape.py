"""tape (the TAP-producing test harness of many npm packages) with per-test results from its
object stream, never from its TAP text.

A tape command is what a package's scripts run, normalised to `tape [-r MODULE]... FILES...`
(FILES may be globs, as tape takes them). miner runs each test file in its own node process under
its reporter (tape-reporter.cjs, written beside the report), which subscribes to
`tape.createStream({objectMode: true})` and writes the same JSON lines as node's reporter, so
miner.ecosystems.node.runner.parse_report reads both. A test's id is its file then its name (and
its parents' names, for subtests):

    test/parse.js::parse()::parses a simple string

A run of chosen tests runs their files; a deselected test runs and is dropped when parsed.
"""

from __future__ import annotations

import base64
import shlex
from importlib import resources

from miner.ecosystems.node import commands

ID_SEPARATOR = "::"
REQUIRE_OPTIONS = ("-r", "--require")


def is_tape_command(command: str) -> bool:
    """`tape …` or `npx tape …`."""
    return commands.program(command) == "tape"


def split_command(command: str) -> tuple[list[str], list[str]]:
    """(the modules tape is told to require first, its file and glob arguments)."""
    words = shlex.split(command)
    words = words[words.index("tape") + 1:] if "tape" in words else words[1:]
    preload: list[str] = []
    files: list[str] = []
    it = iter(words)
    for word in it:
        if word in REQUIRE_OPTIONS:
            preload.append(next(it, ""))
        elif word.startswith("--require="):
            preload.append(word.split("=", 1)[1])
        elif not word.startswith("-"):
            files.append(word)
    return [p for p in preload if p], files


def reporter_source() -> bytes:
    return resources.files("miner.ecosystems.node").joinpath("tape-reporter.cjs").read_bytes()


# A file whose node process stopped before the reporter wrote a line (node refused to start: a bad
# NODE_OPTIONS) is its own entry, carrying the first error line node printed.
_NO_REPORT = ("grep -qF \"\\\"file\\\":\\\"$miner_f\\\"\" {report} 2>/dev/null || {{ "
              "miner_e=$(grep -m1 -E '^[A-Za-z]*Error' {errors} | head -c 300); "
              "miner_e=${{miner_e//\\\\/\\\\\\\\}}; miner_e=${{miner_e//\\\"/\\\\\\\"}}; "
              "printf '{{\"file\": \"%s\", \"names\": [\"%s\"], \"passed\": false, \"message\": \"%s\"}}\\n' "
              "\"$miner_f\" \"$miner_f\" \"${{miner_e:-node stopped before running the file}}\" >> {report}; }}")


def _glob_word(pattern: str) -> str:
    """A file or glob argument as bash expands it (globstar on): its glob characters unquoted."""
    return "".join(c if c in "*?[]" else shlex.quote(c) for c in pattern) if any(c in pattern for c in "*?[") \
        else shlex.quote(pattern)


def suite_command(command: str, report: str, tests: list[str] | None = None, deselect: list[str] = ()) -> str:
    """The shell command running the tape suite (or the files of `tests`) file by file under
    miner's reporter, which appends to `report`; exit 1 when any file's run failed."""
    preload, files = split_command(command)
    if tests:
        files = sorted({t.split(ID_SEPARATOR, 1)[0] for t in tests})
    return file_by_file(report, "tape-reporter.cjs", reporter_source(), files, preload)


def file_by_file(report: str, reporter_name: str, source: bytes, files: list[str], args: list[str],
                 listing: str = "printf '%s\\n' {words}") -> str:
    """The shell command running `node REPORTER REPORT FILE ARGS...` for each file the `files`
    arguments (globs expanded by bash, `listing` turning them into file names) name, the reporter
    (`source`) written beside the report; exit 1 when any file's run failed."""
    reporter = f"{report}.{reporter_name}"
    write = f"echo {base64.b64encode(source).decode()} | base64 -d > {shlex.quote(reporter)}"
    words = " ".join(_glob_word(f) for f in files)
    quoted, errors = shlex.quote(report), shlex.quote(f"{report}.stderr")
    run = (f"miner_tape_rc=0; shopt -s globstar nullglob; rm -f {quoted}; "
           f"for miner_f in $({listing.replace('{words}', words)} | sort -u); do "
           f"node {shlex.quote(reporter)} {quoted} \"$miner_f\" {shlex.join(args)} 2> {errors}; "
           f"miner_file_rc=$?; cat {errors} >&2; if [ $miner_file_rc -ne 0 ]; then miner_tape_rc=1; "
           f"{_NO_REPORT.format(report=quoted, errors=errors)}; fi; done; rm -f {errors}")
    return f"{write} && {{ {run}; }}; rm -f {shlex.quote(reporter)}; (exit $miner_tape_rc)"


def check_command(command: str, test_id: str) -> str:
    """The command a person runs to see one test: tape on its file (tape selects no test by name)."""
    preload, _ = split_command(command)
    requires = [w for p in preload for w in ("-r", p)]
    return shlex.join(["tape", *requires, test_id.split(ID_SEPARATOR, 1)[0]])
