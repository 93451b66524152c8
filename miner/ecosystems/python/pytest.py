"""pytest, Python's test runner: its suite run writing junit XML, the report read per test.

Outcomes come from the XML report (xunit1, which carries each test's file), never from console
output. Test ids are pytest node ids (`tests/test_x.py::TestK::test_y[param]`) rebuilt from the
report, so they can be passed back to pytest to run a subset. RUNNER is what miner.testing and
the other stages call (miner.ecosystems.base.Runner); pytest serves any test command no other
ecosystem's runner claims, as miner lays out a venv with pytest beneath every project.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import PurePosixPath

from miner.ecosystems.base import Runner
from miner.models import PROJECT_DIR, VENV_DIR, Outcome, TestResult

DEFAULT_COMMAND = "python -m pytest"
# Flags appended to every run. A collection error in one module must not hide the other modules'
# outcomes, so collection errors do not stop the session.
REPORT_FLAGS = "-o junit_family=xunit1 -p no:cacheprovider -q --continue-on-collection-errors"
MESSAGE_LINES = 6
MESSAGE_CHARS = 1000
# How pytest refuses asked-for ids it cannot collect (it then runs nothing at all).
NOT_FOUND = re.compile(r"^ERROR: (?:not found:|found no collectors for) (\S.*?)\s*$", re.MULTILINE)
# What pytest's summary line says of a person's run of one test.
PASSED = re.compile(r"\b\d+ passed\b")
SKIPPED = re.compile(r"\b\d+ skipped\b")
LAUNCHERS = ({"python", "python3"}, {"pytest", "py.test"})


def suite_command(command: str, report: str, tests: list[str] | None = None, deselect: list[str] = ()) -> str:
    """The shell command that runs `command` writing a junit report (and only `tests`, if given;
    without the `deselect`ed ones)."""
    parts = [command, f"--junitxml={shlex.quote(report)}", REPORT_FLAGS]
    parts += [f"--deselect={shlex.quote(t)}" for t in deselect]
    if tests:
        parts += [shlex.quote(t) for t in tests]
    return " ".join(parts)


def refused(output: str) -> set[str]:
    """Asked-for ids pytest could not collect, made relative to the project again."""
    return {found.removeprefix(PROJECT_DIR + "/") for found in NOT_FOUND.findall(output)}


def check_command(command: str, test_id: str) -> str:
    """The command a person runs to see one test: the command with its node id."""
    return f"{command} {shlex.quote(test_id)}"


def run_passed(exit_code: int, output: str, healthy_outcome: str = "passed") -> bool:
    """Whether a person's run of one test passed: exit 0 and pytest counting a passed test (a
    test that was skipped when healthy must not be skipped now)."""
    skipped = healthy_outcome == "skipped" and SKIPPED.search(output)
    return exit_code == 0 and bool(PASSED.search(output)) and not skipped


def pytest_args(test_command: str) -> list[str]:
    """The pytest arguments of a test command (`python -m pytest ARGS` or `pytest ARGS`);
    ValueError for any other command."""
    try:
        argv = shlex.split(test_command or DEFAULT_COMMAND)
    except ValueError as exc:
        raise ValueError(f"test command {test_command!r} cannot be parsed: {exc}") from None
    python, pytest = LAUNCHERS
    launcher = argv[0] if argv else ""
    if len(argv) >= 3 and (PurePosixPath(launcher).name in python or launcher == "$MINER_PYTHON") \
            and argv[1:3] == ["-m", "pytest"]:
        return argv[3:]
    if argv and PurePosixPath(argv[0]).name in pytest:
        return argv[1:]
    raise ValueError(f"test command {test_command!r} is not a plain pytest invocation the verifier can guard")


def verifier_spec(test_command: str) -> dict:
    return {"runner": "pytest", "pytest_args": pytest_args(test_command)}


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

# How pytest's junit report words an error in a fixture (the console prints the error itself).
JUNIT_WRAPPED = re.compile(r'^failed on (?:setup|teardown) with "(.*)$')


def printed_forms(line: str) -> list[str]:
    """A reported line as pytest's console prints it: a rewritten assertion without its
    "AssertionError: ", a fixture's error without the report's 'failed on setup with "...'."""
    wrapped = JUNIT_WRAPPED.match(line)
    return [(wrapped.group(1).removesuffix('"') if wrapped else line).removeprefix("AssertionError: ")]


RUNNER = Runner(
    name="pytest", language="Python",
    runtime=f"The project uses the Python of the virtual environment in `{VENV_DIR}`.",
    claims=lambda command: True, suite_command=suite_command, parse_report=parse_junit,
    check_command=check_command, run_passed=run_passed, verifier_spec=verifier_spec, refused=refused,
    # conftest files, package markers (they change module names), the configuration it looks for
    collect_reads=("conftest.py", "__init__.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"),
    printed_forms=printed_forms, volatile=((re.compile(r"pytest-\d+"), "pytest-?"),),
    verifier_files=(("verifier_pytest.py",
                     lambda: resources.files("miner").joinpath("assets", "verifier_pytest.py").read_bytes()),),
)
