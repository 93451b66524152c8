"""What an ecosystem gives the core: its test runners, each as a Runner.

The core (miner.testing, miner.instruction, miner.solver_view, the export) never asks which
language a command belongs to; it asks miner.ecosystems.runner_for(command) for the Runner that
serves it and calls the Runner's functions. An ecosystem's package defines its Runners next to the
code they call (Python's: miner.ecosystems.python.pytest; Node's: miner.ecosystems.node.runner).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from miner.models import TestResult


def _nothing_refused(output: str) -> set[str]:
    return set()


@dataclass(frozen=True)
class Runner:
    """One test runner miner reads.

    claims(command)            whether a test command is this runner's
    suite_command(command, report, tests=None, deselect=())
                               the shell command running the suite (or `tests`) writing `report`
    parse_report(data)         per-test results from that report (the runner's own reporter or
                               structured events, never its console text); {} when unreadable
    check_command(command, id) the command a person runs to see one test
    run_passed(exit, output, healthy_outcome)
                               whether a person's run of check_command passed
    language, runtime          how the instruction names the language and where it runs
    verifier_spec(command)     how the exported verifier runs it (ValueError: it cannot)
    refused(output)            asked-for ids the runner refused to collect (it then ran nothing)
    file_errors_stand_for_tests
                               a file that fails before its tests run is reported as the file
                               alone; its tests take that file's error (miner.testing.observed)
    """

    name: str
    language: str
    runtime: str
    claims: Callable[[str], bool]
    suite_command: Callable[..., str]
    parse_report: Callable[[bytes | str], dict[str, TestResult]]
    check_command: Callable[[str, str], str]
    run_passed: Callable[[int, str, str], bool]
    verifier_spec: Callable[[str], dict]
    refused: Callable[[str], set[str]] = _nothing_refused
    file_errors_stand_for_tests: bool = False
