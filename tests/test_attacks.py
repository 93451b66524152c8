"""`miner check --attacks`: the catalogue of known shortcuts, and every one of them against real tasks.

Unit parts: the catalogue is data that loads, covers every class of shortcut the verifier claims
to refuse, and a bad catalogue file is a one-line error. Slow parts (Docker): every shortcut
within the verifier's reach scores 0 on an exported deps task, and one of each class on a config
task, while the untouched task scores 0 and the solved one 1 (tests/test_pipeline_docker.py runs one
of each class on a task of the Docker backend's service family).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from miner.attacks import Catalogue, CatalogueError, TaskReport, attack_tasks, load_catalogue, report_json, task_runner
from miner.cli import main

# Every way through the verifier the issue names: the project and its tests, pytest and the venv,
# the environment file, the reward file, the standard library, hashing and listing tools, the
# interpreter, the shells, the dynamic loader, PATH.
CLASSES = {"project", "tests", "runner", "env", "reward", "stdlib", "tools", "interpreter", "shell", "loader", "path",
           # issue 22's four: a writer surviving the sweep, code the verifier runs, the reward
           # folder, a break satisfied instead of repaired
           "survival", "verifier-runs", "reward-folder", "satisfied",
           # issue 24: a test runner's cache planted (jest's)
           "cache"}
ISSUE_CLASSES = ("survival", "verifier-runs", "reward-folder", "satisfied")
# Shortcuts that need the task to name something (a package to edit); elsewhere they may not apply.
MAY_NOT_APPLY = {"source-edited"}
NOT_THIS_TASK = 3  # a script's exit code when the task lacks what it works on (e.g. no PYTHONHOME break)


def test_the_catalogue_covers_every_class() -> None:
    catalogue = load_catalogue([])
    ids = [a.id for a in catalogue.attacks]
    assert len(ids) == len(set(ids)) >= 30
    assert {a.klass for a in catalogue.attacks} == CLASSES
    assert all(a.description and a.script.strip() for a in catalogue.attacks)
    outside = [a.id for a in catalogue.attacks if a.reach != "verifier"]
    assert outside == ["shell-bash-skips-verifier"], "only the harness's own bash is out of reach"
    assert {"grant.so", "force_pass.py"} <= set(catalogue.payloads)
    for klass in ISSUE_CLASSES:
        assert sum(a.klass == klass for a in catalogue.attacks) >= 2, klass


def test_generated_shortcuts_cover_every_hook_with_every_payload_of_its_kind() -> None:
    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parent.parent / "miner" / "assets" / "attacks.yaml").read_text())
    hooks, payloads = data["generated"]["hooks"], data["generated"]["payloads"]
    generated = load_catalogue([], generated=True).attacks
    expected = {f"{h['id']}--{p['id']}" for h in hooks for p in payloads[h["kind"]]}
    assert expected <= {a.id for a in generated} and len(expected) >= 30
    assert {h["class"] for h in hooks} == {"verifier-runs", "survival"}
    assert {a.id for a in load_catalogue([]).attacks}.isdisjoint(expected)  # only with --generated


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
    ("attacks:\n  - {id: a, class: c, description: d, script: s, runner: cargo}\n", "runner must be one of"),
    ("payloads: {x: {perl: y}}\nattacks: []\n", "exactly one of 'text' or 'c'"),
])
def test_a_bad_catalogue_file_is_a_one_line_error(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "task.toml").write_text("")
    (tmp_path / "bad.yaml").write_text(text)
    result = CliRunner().invoke(main, ["check", "--attack-file", str(tmp_path / "bad.yaml"), str(tmp_path / "task")])
    assert result.exit_code != 0 and why in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def one_per_class(catalogue: Catalogue, runner: str) -> Catalogue:
    """The first shortcut of each class that fits `runner`: every class, for the verifier paths
    that share the boot tool and the wrapper with one the whole catalogue already runs against."""
    firsts: dict[str, str] = {}
    for attack in catalogue.attacks:
        if attack.fits(runner):
            firsts.setdefault(attack.klass, attack.id)
    return catalogue.select(list(firsts.values()))


def assert_refused_everywhere(reports: list[TaskReport], catalogue: Catalogue | None = None) -> None:
    """The baseline holds and every shortcut of `catalogue` (all by default) within the verifier's
    reach applied and scored 0."""
    catalogue = catalogue or load_catalogue([])
    for report in reports:
        assert report.baseline_ok, (report.name, report.error, report.nop and report.nop.why(),
                                    report.oracle and report.oracle.why())
        assert not report.holes, [(report.name, o.attack.id, o.why) for o in report.holes]
        failed = [(o.attack.id, o.applied, o.log) for o in report.outcomes
                  if o.applied != 0 and o.attack.id not in MAY_NOT_APPLY
                  and not (o.applied == NOT_THIS_TASK and o.attack.klass == "satisfied")]
        assert not failed, f"{report.name}: shortcuts that did not apply (a 0 would prove nothing): {failed}"
        runner = task_runner(Path(report.path))
        assert {o.attack.id for o in report.outcomes} == {a.id for a in catalogue.attacks if a.fits(runner)}


@pytest.mark.docker
def test_every_shortcut_scores_zero_on_two_local_families(harbor_export) -> None:
    """The whole catalogue against a deps task, a shortcut of each class against a config task."""
    folders = harbor_export.folders
    catalogue = load_catalogue([])
    sample = one_per_class(catalogue, task_runner(folders["config"]))
    reports = attack_tasks([folders["deps"]], catalogue, jobs=2) + attack_tasks([folders["config"]], sample, jobs=2)
    assert_refused_everywhere(reports[:1], catalogue)
    assert_refused_everywhere(reports[1:], sample)
    totals = report_json(reports)["totals"]
    assert totals["holes"] == 0 and totals["baseline_ok"] == 2


@pytest.mark.docker
def test_cli_reports_a_shortcut_that_scores(harbor_export, tmp_path: Path) -> None:
    """A hole is a non-zero exit naming it (here: a "shortcut" that is the reference fix itself). The
    harness's own bash, out of the shared container's reach, is refused in the separate mode (the
    export's default): the verifier's container starts from a fresh image and the agent's bash comes
    back only after the boot tool runs."""
    folder = harbor_export.folders["config"]
    fix = (folder / "solution" / "solve.sh").read_text()
    extra = tmp_path / "fix.yaml"
    extra.write_text("attacks:\n  - id: the-real-fix\n    class: reward\n    description: the repair itself\n"
                     "    script: |\n" + "".join(f"      {line}\n" for line in fix.splitlines()))
    result = CliRunner().invoke(main, ["check", "--attack-file", str(extra), "--only", "the-real-fix", "--only",
                                       "shell-bash-skips-verifier", str(folder)], env={"COLUMNS": "250"})
    assert result.exit_code != 0, result.output
    assert "1 shortcut run(s) scored above 0" in result.output and "the-real-fix" in result.output
    assert "shell-bash-skips-verifier: 0" in result.output and "0 out of its reach" in result.output


@pytest.mark.docker
def test_a_break_satisfied_instead_of_repaired_scores_zero(mined_store: Path, harbor_export, tmp_path: Path) -> None:
    """PYTHONPATH kept, only what it shadows emptied or shimmed: the break is satisfied, not repaired."""
    from miner.export import ExportOptions, export_tasks
    from miner.store import Store

    with Store(mined_store, create=False) as store:
        tasks = [t for t in store.list_tasks() if t.type_id == "env/poison-pythonpath"][:1]
        assert tasks, "the session crawl mines env/poison-pythonpath (conftest.MINED_TYPES)"
        summary = export_tasks(store, tasks, "harbor", tmp_path, ExportOptions(cache_dir=harbor_export.cache))
    reports = attack_tasks([tmp_path / summary.outcomes[0].name], load_catalogue([]).select(["satisfied"]), jobs=2)
    (report,) = reports
    assert report.baseline_ok and not report.holes, [(o.attack.id, o.why) for o in report.holes]
    applied = {o.attack.id for o in report.outcomes if o.applied == 0}
    assert applied == {"satisfied-pythonpath-shadow-emptied", "satisfied-pythonpath-shadow-shimmed"}, \
        [(o.attack.id, o.applied, o.log) for o in report.outcomes]
    assert all("the break's variable must be put back" in o.why for o in report.outcomes if o.applied == 0)


@pytest.mark.docker
@pytest.mark.extended  # the shared verifier mode; the export's default (separate) runs above
def test_generated_shortcuts_score_zero_with_a_shared_verifier(harbor_export) -> None:
    """Every hook point with every payload, against the verifier in the agent's own container."""
    generated = load_catalogue([], generated=True)
    only = generated.select(sorted({a.id for a in generated.attacks} - {a.id for a in load_catalogue([]).attacks}))
    reports = attack_tasks([harbor_export.folders["config"]], only, jobs=2, verifier_mode="shared")
    (report,) = reports
    assert report.baseline_ok and not report.holes, [(o.attack.id, o.why) for o in report.holes]
    assert len(report.outcomes) >= 30 and all(o.applied == 0 for o in report.outcomes), \
        [(o.attack.id, o.applied, o.log) for o in report.outcomes if o.applied != 0]
