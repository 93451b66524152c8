"""Instructions describe the symptom (a failing command and its error), never the break or its fix."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import sample_target

from miner.catalogue import load_catalogue, render
from miner.ecosystems.python.registry import published
from miner.instruction import (
    AREAS,
    MAX_LINES,
    area_sentence,
    instruction_leaks,
    message_lines,
    observed_symptom,
    plain_test_command,
    probe_command,
    write_instruction,
    write_instructions,
)
from miner.models import Candidate, HealthyState, Probe, Source, Target, Task

CATALOGUE = load_catalogue()
TEST_ID = "tests/test_report.py::test_totals[week]"
TARGETS = {
    "distribution": Target(kind="distribution", name="tabulate", attrs={"version": "0.9.0"}),
    "module": Target(kind="module", name="tabulate", path="tabulate/__init__.py", attrs={"dist": "tabulate"}),
    "config": Target(kind="config", name="conf/report.toml", path="conf/report.toml", attrs={"format": "toml"}),
    "data": Target(kind="data", name="samples/rows.csv", path="samples/rows.csv", attrs={}),
    "script": Target(kind="script", name="report-cli", path="bin/report-cli", attrs={"dist": "weekly"}),
    "envvar": Target(kind="envvar", name="REPORT_LOCALE", attrs={"value": "en_GB"}),
}


def target_for(itype) -> Target:
    """A sample target of the type's kind (named unlike anything in the error messages used here)."""
    sample = sample_target(itype)
    base = TARGETS.get(itype.target)
    return base.model_copy(update={"attrs": {**sample.attrs, **base.attrs}}) if base else sample
CONTEXT = {
    "mode": "644", "size": 40, "dist": "tabulate", "version": "0.9.0",
    "value": "en_GB", "bad_version": "0.8.10", "key": "output.width", "line": 4, "key_line": "width = 80",
    "old_line": "width = 80", "new_line": 'width = "80"', "old_value": "80", "new_value": '"80"',
    "wrong_value": "en_BG", "sibling": "conf/other.ini", **published("tabulate==0.9.0").context(),
    "stated_in": ["README.md"], "stated": "README.md states REPORT_LOCALE=en_GB", "evidence_kind": "project-files",
    "old_version": "0.8.9", "conflict_version": "0.8.10", "required_by": "weekly", "specifier": ">=0.9",
    "user_key": "output.width", "user_b64": "aGVsbAo=", "user_value": '"80"',
    "entry": "node_modules/left-pad/lib/index.js",
    "drift_version": "1.2.0", "declared": "package.json asks ^1.0.0", "integrity": "sha512-y",
    "peer_of": "left-pad-plugin", "peer_version": "2.0.0", "peer_range": "^2.0.0",
    "program": "left-pad", "bin_file": "bin/cli.js", "link": "node_modules/.bin/left-pad",
}


def real_failure(code: str) -> str:
    """The error output of a real Python process (what a broken run records)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    return result.stderr


def make(type_id: str, message: str, f2p=(TEST_ID,), probes=(), broken=None):
    itype = CATALOGUE[type_id]
    target = target_for(itype)
    inversion = render(itype, target, CONTEXT)
    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="python -m pytest",
                           outcomes={t: "passed" for t in [*f2p, "tests/test_report.py::test_header"]},
                           probes=list(probes))
    candidate = Candidate(id="cand", repo="r", commit="c", inversion=inversion, status="validated",
                          f2p=list(f2p), p2p=["tests/test_report.py::test_header"],
                          broken=broken or {t: "failed" for t in f2p}, broken_messages={f2p[0]: message})
    task = Task(id="cand", repo="r", commit="c", source=Source(raw="x", kind="local", location="/x"),
                type_id=inversion.type_id, family=inversion.family, target=target, summary=inversion.summary,
                break_script=inversion.break_script, fix_script=inversion.fix_script, f2p=list(f2p),
                p2p=candidate.p2p, test_command="python -m pytest")
    return task, candidate, healthy


@pytest.mark.parametrize("type_id", sorted(CATALOGUE))
def test_instruction_never_names_type_family_target_or_fix(type_id):
    message = real_failure("raise RuntimeError('report totals do not add up: 12 != 15')")
    task, candidate, healthy = make(type_id, message)
    text = write_instruction(task, candidate, healthy)
    assert type_id not in text
    assert not re.search(rf"\b{re.escape(task.family)}\b", text, re.IGNORECASE)
    assert task.summary not in text
    assert task.target.name not in text
    for line in task.fix_script.splitlines():
        if len(line.strip()) >= 12 and not line.startswith("set -"):
            assert line.strip() not in text
    for word in ("pip install", "chmod", "base64", "uninstall", "symlink", "PYTHONPATH", ".pth"):
        assert word not in text
    assert f"python -m pytest '{TEST_ID}'" in text
    assert "report totals do not add up: 12 != 15" in text
    assert "source code" in text and "tests" in text


def test_error_lines_quoting_the_answer_are_dropped():
    task, candidate, healthy = make("deps/uninstall", "")
    fix_line = next(line for line in task.fix_script.splitlines() if "pip install" in line)
    message = "\n".join([
        "E   ModuleNotFoundError: No module named 'tabulate'",
        f"hint: {task.summary}",
        f"hint: run {fix_line.strip()}",
        f"from {task.type_id}",
    ])
    lines = message_lines(message, [task.type_id, task.summary, fix_line.strip()])
    assert lines == ["E   ModuleNotFoundError: No module named 'tabulate'"]
    candidate.broken_messages[TEST_ID] = message
    text = write_instruction(task, candidate, healthy)
    assert "No module named 'tabulate'" in text  # the symptom itself may name a module
    assert "pip install" not in text and task.summary not in text and task.type_id not in text


def test_message_is_cut_to_its_first_lines():
    message = real_failure("import sys\nfor i in range(40): print(f'line {i}', file=sys.stderr)\nraise SystemExit(1)")
    lines = message_lines(message, [])
    assert lines == [f"line {i}" for i in range(MAX_LINES)]
    assert message_lines("x" * 1000, [])[0].endswith(" ...")


def test_a_real_test_is_shown_before_a_probe_and_one_with_a_message_first():
    probe = Probe(id="probe::import::weekly", kind="import", module="weekly")
    other = "tests/test_report.py::test_empty"
    task, candidate, healthy = make("deps/bad-pth", "", f2p=(other, TEST_ID, probe.id), probes=[probe])
    candidate.broken_messages = {TEST_ID: "AssertionError: 3 != 4", probe.id: "ImportError: halted"}
    symptom = observed_symptom(task, candidate, healthy)
    assert symptom.check == TEST_ID and symptom.message == ["AssertionError: 3 != 4"]
    assert symptom.failing == 3
    assert "; 2 other checks that used to pass fail too" in write_instruction(task, candidate, healthy)


def test_the_most_direct_error_is_shown():
    first, second, third = (f"tests/test_cli.py::test_{n}" for n in ("a", "b", "c"))
    task, candidate, healthy = make("env/poison-pythonpath", "", f2p=(first, second, third))
    traceback = "Traceback (most recent call last):\n" + "".join(f'  File "x.py", line {i}\n' for i in range(20))
    candidate.broken_messages = {
        first: traceback + "AttributeError: module 'yaml' has no attribute 'safe_load'",
        second: "AttributeError: module 'yaml' has no attribute 'safe_load'\n" + "context line\n" * 5,
        third: "AttributeError: module 'yaml' has no attribute 'safe_load'",
    }
    assert observed_symptom(task, candidate, healthy).check == third


def test_a_failing_probe_shows_its_own_command():
    probe = Probe(id="probe::script::report-cli --help", kind="script", argv=["report-cli", "--help"])
    task, candidate, healthy = make("fs/no-exec", "bash: report-cli: Permission denied", f2p=(probe.id,),
                                    probes=[probe])
    symptom = observed_symptom(task, candidate, healthy)
    assert symptom.command == "report-cli --help"
    assert probe_command(Probe(id="p", kind="import", module="weekly")) == "python -c 'import weekly'"


def test_outcomes_other_than_failed_are_described():
    task, candidate, healthy = make("data/truncate", "", broken={TEST_ID: "missing"})
    text = write_instruction(task, candidate, healthy)
    assert "no longer runs at all" in text and "Its output starts with" not in text
    task, candidate, healthy = make("data/truncate", "", broken={TEST_ID: "skipped"})
    assert "is now skipped" in write_instruction(task, candidate, healthy)


def test_report_options_are_removed_from_the_test_command():
    assert plain_test_command("python -m pytest --junitxml=/sandbox/.miner/r.xml -q") == "python -m pytest -q"
    assert plain_test_command("pytest --junit-xml /tmp/r.xml tests") == "pytest tests"


def test_no_failing_check_is_an_error():
    task, candidate, healthy = make("data/crlf", "")
    candidate.f2p = []
    with pytest.raises(ValueError):
        write_instruction(task, candidate, healthy)


def test_a_dockerized_projects_image_checks_are_named_without_the_answer():
    """A service's HTTP answer and health check are checked by the verifier: the agent is told how
    to run them (start the image's command, then ask it), never what broke."""
    http = Probe(id="probe::http::8000/", kind="http", url="http://127.0.0.1:8000/",
                 argv=["python3", "server.py", "--config", "service.ini"], expected_exit=200)
    health = Probe(id="probe::healthcheck", kind="command", argv=["CMD-SHELL", "python3 check.py"], expected_exit=0)
    task, candidate, healthy = make("config/wrong-type", "ConnectionRefusedError: [Errno 111] Connection refused",
                                    f2p=(http.id,), probes=[http, health])
    task = task.model_copy(update={"p2p": [*task.p2p, health.id]})
    symptom = observed_symptom(task, candidate, healthy)
    assert symptom.command.splitlines()[0] == "python3 server.py --config service.ini &"
    assert 'urlopen("http://127.0.0.1:8000/", timeout=10)' in symptom.command.splitlines()[-1]
    assert probe_command(health) == "python3 check.py"
    text = write_instruction(task, candidate, healthy)
    assert "`python3 server.py --config service.ini`, started there, must answer `GET http://127.0.0.1:8000/`" in text
    assert "health check (`python3 check.py`)" in text
    plain, c2, h2 = make("config/wrong-type", "ValueError: bad width")
    assert "container's own behaviour" not in write_instruction(plain, c2, h2)


@pytest.mark.parametrize("type_id", sorted(CATALOGUE))
def test_every_variant_passes_the_leak_check(type_id):
    message = real_failure("raise RuntimeError('report totals do not add up: 12 != 15')")
    task, candidate, healthy = make(type_id, message)
    task.category = CATALOGUE[type_id].category
    task.evidence = render(CATALOGUE[type_id], task.target, CONTEXT).evidence
    texts = write_instructions(task, candidate, healthy)
    assert set(texts) == {"symptom", "hard", "hinted"}
    assert texts["symptom"] == write_instruction(task, candidate, healthy)
    for variant, text in texts.items():
        assert instruction_leaks(task, text) == [], variant
        assert type_id not in text and task.target.name not in text and task.summary not in text
        assert f"python -m pytest '{TEST_ID}'" in text
    assert "report totals do not add up" not in texts["hard"]
    assert "report totals do not add up" in texts["hinted"]
    assert AREAS[task.category] in texts["hinted"] and AREAS[task.category] not in texts["symptom"]


def test_the_leak_check_finds_the_answer():
    task, candidate, healthy = make("deps/uninstall", "ModuleNotFoundError: No module named 'tabulate'")
    task.evidence = render(CATALOGUE["deps/uninstall"], task.target, CONTEXT).evidence
    leaked = f"Try this: {task.fix_script.splitlines()[1].strip()}"
    assert instruction_leaks(task, leaked) == [task.fix_script.splitlines()[1].strip()]
    assert instruction_leaks(task, f"({task.summary})") == [task.summary]


def test_a_compound_hint_names_every_part_area_once():
    text = area_sentence(["dependencies", "network-security", "dependencies"])
    assert text.startswith("Hint: 3 separate things are broken")
    assert text.count(AREAS["dependencies"]) == 1 and AREAS["network-security"] in text
    assert area_sentence(["no-such-category"]) == "Hint: the cause lies in the environment around the project."


def test_a_project_judged_by_its_probes_alone_is_asked_for_its_checks() -> None:
    """A Dockerized service without a suite (fixtures/perl-service): no pytest, no venv, no language."""
    from miner.instruction import Symptom, render_instruction

    symptom = Symptom(command="perl tallyd.pl &\nsleep 3", check="probe::http::8080/", outcome="failed",
                      message=["HTTP status 500, expected 200"], failing=2)
    text = render_instruction(symptom, "python -m pytest", "The container's own behaviour is checked as well.",
                              suite=False)
    assert text.startswith("# Make the project's checks pass again")
    assert "The project in `/sandbox/project` used to work: its checks passed." in text
    assert "pytest" not in text and "Python" not in text and "venv" not in text and "skip" not in text
    with_suite = render_instruction(symptom, "python -m pytest")
    assert "the whole suite (`python -m pytest`" in with_suite and "The Python project" in with_suite
