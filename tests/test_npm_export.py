"""npm projects on the Docker backend and their exported tasks: a real `miner crawl --backend docker`
of fixtures/node-lib (Debian's nodejs and npm installed in the image by the build, the registry's
packages, miner's tape), exported to Harbor folders whose verifier runs tape file by file.

The verifier holds the npm trees (the project's node_modules, /sandbox/node_modules where miner links
tape, node's global folders, miner's install of tape) to their healthy bytes: untouched 0, the
reference fix 1, a solver's own repair (`npm ci --offline`) 1, and the shortcuts through tape and
node_modules 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import HARBOR_AGENTS, export_fixture


pytestmark = [pytest.mark.docker, pytest.mark.slow]

NODE_SHORTCUTS = ["tape-assert-forced", "tape-link-repointed", "node-package-shadowed-nested",
                  "node-package-moved-home", "node-options-preload", "node-binary-wrapped", "node-path-shadow",
                  "node-builtin-js-edited"]
# A repair a solver would write, not the reference fix: everything reinstalled from npm's cache.
SOLVER_REPAIR = """
cd "$MINER_PROJECT"
sed -i '/NODE_OPTIONS/d' /sandbox/home/.bashrc; unset NODE_OPTIONS
chmod -R u+rwX,go+rX node_modules
npm ci --offline
"""


@pytest.fixture(scope="module")
def npm_export(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return export_fixture(tmp_path_factory.mktemp("npm-crawl"), "node-lib", "--backend", "docker")


def test_an_npm_project_is_mined_on_the_docker_backend(npm_export: list[Path]) -> None:
    types = {json.loads((f / "tests" / "spec.json").read_text())["task_id"]: f.name.split("__")[1] for f in npm_export}
    families = {name.split("-", 1)[0] for name in types.values()}
    assert len(types) >= 4 and {"deps", "fs", "env"} <= families, types
    spec = json.loads((npm_export[0] / "tests" / "spec.json").read_text())
    assert spec["runner"] == "tape" and spec["tape_preload"] == []
    assert (npm_export[0] / "tests" / "tape_reporter.cjs").is_file()


def test_exported_tape_tasks_check_out_and_a_solvers_repair_scores(npm_export: list[Path]) -> None:
    from miner.attacks import Attack, Catalogue, attack_tasks
    from miner.check import check_tasks

    for result in check_tasks(npm_export, jobs=2):
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
    repair = Catalogue(attacks=[Attack("solver-npm-ci", "deps", "npm ci from the cache", SOLVER_REPAIR)])
    one_a_type = {folder.name.split("__")[1]: folder for folder in npm_export}
    for report in attack_tasks(list(one_a_type.values()), repair, jobs=2):
        outcome = report.outcomes[0]
        assert outcome.reward == 1, f"{report.name}: {outcome.why}\n{outcome.log[-1500:]}"


def test_shortcuts_through_tape_and_node_modules_score_zero(npm_export: list[Path]) -> None:
    from miner.attacks import attack_tasks, load_catalogue

    catalogue = load_catalogue([]).select(NODE_SHORTCUTS)
    assert len(catalogue.attacks) == len(NODE_SHORTCUTS)
    # on the tasks whose break leaves a package node cannot load (where every stand-in has something
    # to stand in for); the shortcuts through tape and node's options apply to any task alike
    deps = [folder for folder in npm_export if "__deps-" in folder.name]
    assert len(deps) >= 2, [folder.name for folder in npm_export]
    reports = attack_tasks(deps, catalogue, jobs=2)
    for report in reports:
        assert report.baseline_ok and len(report.outcomes) == len(NODE_SHORTCUTS)
        assert not report.holes, [(o.attack.id, o.reward, o.why) for o in report.holes]
    # every shortcut went through (its script applied) on some task, so each was really refused
    applied = {o.attack.id for r in reports for o in r.outcomes if o.applied == 0}
    assert applied == set(NODE_SHORTCUTS), set(NODE_SHORTCUTS) - applied


# Each after the reference fix: the tests would pass, so only the check named refuses them.
TAMPERING = {
    "tape's own code edited": ("printf '\\n// edited\\n' >> /sandbox/.miner-node/node_modules/tape/lib/test.js",
                               "/sandbox/.miner-node/node_modules/tape/lib differs"),
    "the tape link repointed": ("cp -rL /sandbox/node_modules/tape /sandbox/home/tape && "
                                "ln -sfn /sandbox/home/tape /sandbox/node_modules/tape", "/sandbox/node_modules differs"),
    "a package in a nested node_modules": ("mkdir -p lib/node_modules/ms && cp -r node_modules/ms/. lib/node_modules/ms/",
                                           "lib/node_modules/ms/index.js was added to the project"),
    "a package in a global folder": ("mkdir -p /sandbox/home/.node_modules/ms && cp -r node_modules/ms/. "
                                     "/sandbox/home/.node_modules/ms/", "/sandbox/home/.node_modules/ms differs"),
}


def test_each_npm_tree_check_refuses_on_its_own(npm_export: list[Path]) -> None:
    """The reference fix, then one change to what node loads packages or tape from: each is refused,
    by the check that guards it (the tests themselves would pass)."""
    from miner.attacks import Attack, Catalogue, attack_tasks

    folder = next(f for f in npm_export if "__deps-node-entry-corrupt__" in f.name)
    fix = (folder / "solution" / "solve.sh").read_text()
    attacks = [Attack(f"fix-then-{i}", "runner", name, f"{fix}\ncd \"$MINER_PROJECT\"\n{script}\n")
               for i, (name, (script, _)) in enumerate(TAMPERING.items())]
    (report,) = attack_tasks([folder], Catalogue(attacks=attacks), jobs=2)
    assert report.baseline_ok
    for outcome, (name, (_, why)) in zip(report.outcomes, TAMPERING.items()):
        assert outcome.applied == 0 and outcome.reward == 0, (name, outcome.log)
        assert why in outcome.why, (name, outcome.why)


@pytest.mark.harbor
@pytest.mark.parametrize("agent, expected", HARBOR_AGENTS)
def test_harbor_scores_a_tape_task_per_family(harbor, npm_export: list[Path], tmp_path: Path, agent: str,
                                              expected: float) -> None:
    chosen: dict[str, Path] = {}
    for folder in npm_export:
        chosen.setdefault(folder.name.split("__")[1].split("-", 1)[0], folder)
    out = tmp_path / "tasks"
    out.mkdir()
    for folder in chosen.values():
        (out / folder.name).symlink_to(folder)
    harbor.assert_run_scores(out, {f.name: family for family, f in chosen.items()}, agent, expected, tmp_path / "jobs")
