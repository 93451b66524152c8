"""`miner check --attacks`: the catalogue of known shortcuts, and every one of them against real tasks.

Unit parts: the catalogue is data that loads, covers every class of shortcut the verifier claims
to refuse, and a bad catalogue file is a one-line error. Slow parts (Docker): every shortcut
within the verifier's reach scores 0 on exported tasks of two local families, while the untouched
task scores 0 and the solved one 1 (tests/test_pipeline_docker.py does the same on a task of the
Docker backend's system family).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from miner.attacks import CatalogueError, TaskReport, attack_tasks, load_catalogue, report_json
from miner.cli import main

# Every way through the verifier the issue names: the project and its tests, pytest and the venv,
# the environment file, the reward file, the standard library, hashing and listing tools, the
# interpreter, the shells, the dynamic loader, PATH.
CLASSES = {"project", "tests", "runner", "env", "reward", "stdlib", "tools", "interpreter", "shell", "loader", "path"}
# Shortcuts that need the task to name something (a package to edit); elsewhere they may not apply.
MAY_NOT_APPLY = {"source-edited"}


def test_the_catalogue_covers_every_class() -> None:
    catalogue = load_catalogue([])
    ids = [a.id for a in catalogue.attacks]
    assert len(ids) == len(set(ids)) >= 30
    assert {a.klass for a in catalogue.attacks} == CLASSES
    assert all(a.description and a.script.strip() for a in catalogue.attacks)
    outside = [a.id for a in catalogue.attacks if a.reach != "verifier"]
    assert outside == ["shell-bash-skips-verifier"], "only the harness's own bash is out of reach"
    assert {"grant.so", "force_pass.py"} <= set(catalogue.payloads)


def test_only_and_extra_files(tmp_path: Path) -> None:
    extra = tmp_path / "more.yaml"
    extra.write_text("attacks:\n  - id: my-shortcut\n    class: reward\n    description: d\n    script: echo 1\n")
    catalogue = load_catalogue([extra])
    assert [a.id for a in catalogue.select(["my-shortcut"]).attacks] == ["my-shortcut"]
    assert {a.klass for a in catalogue.select(["loader"]).attacks} == {"loader"}
    with pytest.raises(CatalogueError, match="no shortcut or class named nope"):
        catalogue.select(["nope"])
    extra.write_text("attacks:\n  - id: conftest-added\n    class: project\n    description: d\n    script: x\n")
    with pytest.raises(CatalogueError, match="'conftest-added' is already in the catalogue"):
        load_catalogue([extra])


@pytest.mark.parametrize("text, why", [
    ("attacks: [1", "not valid YAML"),
    ("attacks:\n  - id: x\n", "lacks class, description, script"),
    ("attacks:\n  - {id: Bad_Id, class: c, description: d, script: s}\n", "must be lowercase"),
    ("attacks:\n  - {id: a, class: c, description: d, script: s, reach: moon}\n", "reach must be one of"),
    ("payloads: {x: {perl: y}}\nattacks: []\n", "exactly one of 'text' or 'c'"),
])
def test_a_bad_catalogue_file_is_a_one_line_error(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "task.toml").write_text("")
    (tmp_path / "bad.yaml").write_text(text)
    result = CliRunner().invoke(main, ["check", "--attack-file", str(tmp_path / "bad.yaml"), str(tmp_path / "task")])
    assert result.exit_code != 0 and why in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def assert_refused_everywhere(reports: list[TaskReport]) -> None:
    """The baseline holds and every shortcut within the verifier's reach applied and scored 0."""
    for report in reports:
        assert report.baseline_ok, (report.name, report.error, report.nop and report.nop.why(),
                                    report.oracle and report.oracle.why())
        assert not report.holes, [(report.name, o.attack.id, o.why) for o in report.holes]
        failed = [(o.attack.id, o.applied, o.log) for o in report.outcomes
                  if o.applied != 0 and o.attack.id not in MAY_NOT_APPLY]
        assert not failed, f"{report.name}: shortcuts that did not apply (a 0 would prove nothing): {failed}"
        assert {o.attack.id for o in report.outcomes} == {a.id for a in load_catalogue([]).attacks}


@pytest.mark.docker
def test_every_shortcut_scores_zero_on_two_local_families(harbor_export) -> None:
    folders = harbor_export.folders
    chosen = [folders[family] for family in ("deps", "config")]
    reports = attack_tasks(chosen, load_catalogue([]), jobs=2)
    assert_refused_everywhere(reports)
    totals = report_json(reports)["totals"]
    assert totals["holes"] == 0 and totals["baseline_ok"] == 2


@pytest.mark.docker
def test_cli_reports_a_shortcut_that_scores(harbor_export, tmp_path: Path) -> None:
    """A shortcut the verifier cannot refuse (the harness's own bash) is reported as out of reach; a
    hole is a non-zero exit naming it (here: a "shortcut" that is the reference fix itself)."""
    folder = harbor_export.folders["config"]
    fix = (folder / "solution" / "solve.sh").read_text()
    extra = tmp_path / "fix.yaml"
    extra.write_text("attacks:\n  - id: the-real-fix\n    class: reward\n    description: the repair itself\n"
                     "    script: |\n" + "".join(f"      {line}\n" for line in fix.splitlines()))
    result = CliRunner().invoke(main, ["check", "--attack-file", str(extra), "--only", "the-real-fix", "--only",
                                       "shell-bash-skips-verifier", str(folder)], env={"COLUMNS": "250"})
    assert result.exit_code != 0, result.output
    assert "1 shortcut run(s) scored above 0" in result.output and "the-real-fix" in result.output
    assert "1 out of its reach" in result.output
