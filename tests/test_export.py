"""Exporters and the exported verifier, on tasks the real crawl mined from fixtures/.

Unit parts need nothing; the rest (slow: it needs the session crawl) exports real tasks mined
from the good fixtures, builds them in a real Docker engine (marked `docker`), and attacks the
verifier: each attack is applied to the broken environment in a fresh container, a naive pytest
run shows that it would fool a naive verifier, and tests/test.sh must still score 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tarfile
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import LOCAL_FAMILIES, run_miner

from miner.check import Checker, read_config
from miner.sandbox.docker.gateway import read_file
from miner.cli import main
from miner.export import ExportOptions, export_tasks, select_tasks
from miner.export.archive import FIXED_MTIME, project_tarball
from miner.evidence import needs_network
from miner.export.common import ExportError, TaskSource, compose_override, constraints, network_route
from miner.export.harbor import task_config
from miner.models import Evidence, HealthyState, Project, Source, Target, Task, content_id
from miner.sandbox.base import BuildSpec
from miner.sandbox.docker import images
from miner.store import Store
from miner.ecosystems.python.pytest import parse_junit, pytest_args

ASSETS = Path(__file__).resolve().parent.parent / "miner" / "assets"


# What an agent would add to force every test to pass: replace how pytest builds test reports.
FORCE_PASS = textwrap.dedent("""
    import _pytest.reports as _miner_reports
    _miner_original = _miner_reports.TestReport.from_item_and_call.__func__
    def _miner_forced(cls, item, call):
        report = _miner_original(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report
    _miner_reports.TestReport.from_item_and_call = classmethod(_miner_forced)
""")



def load_verifier():
    """The standalone verifier module (miner/assets/verifier.py), imported by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("miner_asset_verifier", ASSETS / "verifier.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


# -- no engine needed -------------------------------------------------------------------------------


def test_project_tarball_is_deterministic_and_keeps_modes(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("run.sh")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    first = project_tarball(root)
    os.utime(root / "pkg" / "mod.py", (1, 1))
    assert project_tarball(root) == first  # mtimes do not matter
    (tmp_path / "t.tar.gz").write_bytes(first)
    with tarfile.open(tmp_path / "t.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "project/__pycache__/junk.pyc" not in members
    assert members["project/run.sh"].mode & 0o111
    assert members["project/link"].issym() and members["project/link"].linkname == "run.sh"
    assert {m.uid for m in members.values()} == {0} and {m.mtime for m in members.values()} == {FIXED_MTIME}


@pytest.mark.slow  # a real wheel build, flit_core from the package index
def test_a_flit_project_builds_from_its_exported_tarball(tmp_path: Path) -> None:
    """The image build unpacks the tarball with its mtimes; flit_core zips files with them and
    refused mtime 0 ("ZIP does not support timestamps before 1980": every itsdangerous task)."""
    root = tmp_path / "flitty"
    (root / "flitty").mkdir(parents=True)
    (root / "flitty" / "__init__.py").write_text('"""A flit project."""\n__version__ = "0.1"\n')
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["flit_core>=3.4"]\n'
                                         'build-backend = "flit_core.buildapi"\n\n[project]\nname = "flitty"\n'
                                         'dynamic = ["version", "description"]\n')
    (tmp_path / "p.tar.gz").write_bytes(project_tarball(root))
    with tarfile.open(tmp_path / "p.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="tar")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "wheels"),
                           str(tmp_path / "unpacked" / "project")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert list((tmp_path / "wheels").glob("flitty-0.1-*.whl"))


def test_pytest_args_of_test_commands() -> None:
    assert pytest_args("python -m pytest") == []
    assert pytest_args("python3 -m pytest -x tests/unit") == ["-x", "tests/unit"]
    assert pytest_args("pytest -k 'not slow'") == ["-k", "not slow"]
    with pytest.raises(ValueError, match="not a plain pytest"):
        pytest_args("make test")


def test_constraints_pin_dependencies_but_not_the_project_or_build_tools() -> None:
    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="python -m pytest", outcomes={},
                           distributions={"pyyaml": "6.0.1", "pip": "23.0", "setuptools": "68.0", "app": "1.0"},
                           project_dists=["app"])
    assert constraints(healthy) == "pyyaml==6.0.1\n"
    assert constraints(None) == ""


def test_options_reject_an_org_harbor_would_refuse() -> None:
    with pytest.raises(ValueError, match="--org"):
        ExportOptions(org="my org")
    assert ExportOptions(org="acme.labs").org == "acme.labs"
    with pytest.raises(ValueError, match="--network-policy"):
        ExportOptions(network_policy="open")


def evidence_task(*evidence: Evidence) -> TaskSource:
    source = Source(raw="pypi:greeter==1.0", kind="pypi", location="greeter==1.0")
    task = Task(id="t" * 16, repo="pypi:greeter", commit="c", source=source, type_id="data/truncate",
                family="data", target=Target(kind="data", name="d.csv", path="d.csv"), summary="s",
                break_script="b", fix_script="f", f2p=["t::a"], p2p=["t::b"], evidence=list(evidence))
    project = Project(source=source, repo="pypi:greeter", commit="c", path=Path("/nonexistent"))
    return TaskSource(task=task, project=project, spec=BuildSpec(), healthy=None, name="greeter")


def test_the_network_a_repair_needs_follows_its_evidence() -> None:
    """Rule 8 in the exports: the index's hosts for the index or the sdist (pip's forwarded URLs when
    set), the archive's for the archive, none for evidence inside the environment."""
    offline = evidence_task(Evidence(kind="reversible", detail="CRLF"))
    index = evidence_task(Evidence(kind="published-source", detail="greeter==1.0"))
    both = evidence_task(Evidence(kind="package-index", detail="six==1.17.0"),
                         Evidence(kind="debian-archive", detail="libffi8=3.4.4-1"))
    assert network_route(offline.task).hosts == ()
    assert network_route(index.task).hosts == ("pypi.org", "files.pythonhosted.org")
    assert network_route(index.task, {"PIP_INDEX_URL": "https://mirror.example/simple"}).hosts == ("mirror.example",)
    assert network_route(both.task).hosts == ("pypi.org", "files.pythonhosted.org", "deb.debian.org",
                                              "security.debian.org")
    assert network_route(evidence_task().task).hosts == ()  # recorded before rule 8: unknown, see below
    plain = task_config(offline, ExportOptions())
    assert plain["metadata"]["evidence"] == ["reversible: CRLF"] and plain["metadata"]["repair_network"] == "none"
    assert "network_mode" not in plain["environment"]
    harbor = ExportOptions(network_policy="harbor")
    assert task_config(offline, harbor)["environment"]["network_mode"] == "no-network"
    online = task_config(both, harbor)
    assert (online["environment"]["network_mode"], online["metadata"]["allowed_hosts"]) == (
        "allowlist", online["environment"]["allowed_hosts"])
    assert task_config(evidence_task(), harbor)["metadata"]["repair_network"] == "unknown"
    assert "network_mode: none" in compose_override(offline=True)
    assert "network_mode" not in compose_override()


def test_verifier_reads_junit_node_ids_as_miner_testing_does(tmp_path: Path) -> None:
    """The standalone verifier repeats miner.testing's id rules; a real pytest report proves they agree."""
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "base.py").write_text("class Base:\n    def test_inherited(self):\n        pass\n")
    (tmp_path / "tests" / "sub" / "test_things.py").write_text(textwrap.dedent("""
        import pytest
        from tests.base import Base

        @pytest.mark.parametrize("n", [1, 2, "a b"])
        def test_param(n):
            assert n != 2

        class TestGroup(Base):
            class TestInner:
                def test_deep(self):
                    pass
            def test_skip(self):
                pytest.skip("no")

        def test_fail():
            assert False
    """))
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "sub" / "__init__.py").write_text("")
    report = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                    f"--junitxml={report}", "tests"], cwd=tmp_path, capture_output=True)
    expected = {k: v.outcome for k, v in parse_junit(report.read_bytes()).items()}
    got = load_verifier().parse_junit(report.read_bytes())
    assert {k: v[-1] for k, v in got.items()} == expected
    assert expected["tests/sub/test_things.py::test_param[2]"] == "failed"
    assert expected["tests/sub/test_things.py::TestGroup::TestInner::test_deep"] == "passed"
    assert expected["tests/sub/test_things.py::TestGroup::test_skip"] == "skipped"


def run_guard(tmp_path: Path, extra_allowed: list[Path] = ()) -> dict:
    """Run verifier_pytest.py (the guard) with this interpreter on tmp_path's tests; its report."""
    import site

    verifier = load_verifier()
    runner = verifier.runner_files(site.getsitepackages())
    allowed = {"runner": sorted(os.path.realpath(p) for p in runner),
               "plugin_files": sorted({os.path.realpath(p) for p in runner}
                                      | {str(ASSETS / "verifier_pytest.py")}
                                      | {os.path.realpath(p) for p in extra_allowed})}
    (tmp_path / "allowed.json").write_text(json.dumps(allowed))
    subprocess.run([sys.executable, str(ASSETS / "verifier_pytest.py"), str(tmp_path / "guard.json"),
                    str(tmp_path / "allowed.json"), "--", "-q", "-p", "no:cacheprovider", "tests"],
                   cwd=tmp_path, capture_output=True, timeout=300)
    return json.loads((tmp_path / "guard.json").read_text())


def test_guard_records_outcomes_of_an_honest_run(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "import pytest\ndef test_ok():\n    pass\ndef test_bad():\n    assert 0\n"
        "@pytest.mark.skip\ndef test_skipped():\n    pass\n@pytest.mark.xfail\ndef test_xfail():\n    assert 0\n")
    report = run_guard(tmp_path, [tmp_path / "tests" / "test_a.py"])
    assert report["violations"] == []
    assert report["outcomes"] == {"tests/test_a.py::test_ok": "passed", "tests/test_a.py::test_bad": "failed",
                                  "tests/test_a.py::test_skipped": "skipped", "tests/test_a.py::test_xfail": "skipped"}


def test_guard_rejects_a_plugin_from_outside_the_healthy_files(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_bad():\n    assert 0\n")
    (tmp_path / "conftest.py").write_text(FORCE_PASS)
    report = run_guard(tmp_path, [tmp_path / "tests" / "test_a.py"])
    assert report["outcomes"] == {"tests/test_a.py::test_bad": "passed"}  # the attack worked on pytest...
    assert any("unexpected pytest plugin" in v and "conftest.py" in v for v in report["violations"])  # ...not here


def test_guard_rejects_pytest_internals_patched_by_imported_code(tmp_path: Path) -> None:
    """A dependency the tests import (not a plugin, not a protected file) patches pytest: caught at run time."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "helper_dep.py").write_text(FORCE_PASS)
    (tmp_path / "tests" / "test_a.py").write_text("import helper_dep\ndef test_bad():\n    assert 0\n")
    report = run_guard(tmp_path, [tmp_path / "tests" / "test_a.py"])
    assert report["outcomes"] == {"tests/test_a.py::test_bad": "passed"}
    assert any("TestReport.from_item_and_call" in v for v in report["violations"]), report["violations"]


# -- exports of real mined tasks -------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(mined_store: Path) -> Store:
    with Store(mined_store, create=False) as opened:
        yield opened


@pytest.fixture(scope="module")
def export_cache(harbor_export) -> Path:
    """Fetched sources and healthy manifests of the exports (the session store stays read-only)."""
    return harbor_export.cache


@pytest.mark.docker
def test_the_mined_tasks_cover_every_local_family(harbor_export) -> None:
    assert set(LOCAL_FAMILIES) <= set(harbor_export.chosen), f"families mined: {sorted(harbor_export.chosen)}"


@pytest.mark.docker
def test_harbor_layout_and_contents(harbor_export) -> None:
    chosen, out, summary = harbor_export.chosen, harbor_export.out, harbor_export.summary
    assert {o.status for o in summary.outcomes} == {"written"}
    for task in chosen.values():
        folder = out / next(o.name for o in summary.outcomes if o.task_id == task.id)
        config = read_config(folder)
        assert config["task"]["name"] == f"miner/{folder.name}"
        meta = config["metadata"]
        assert (meta["inversion_type"], meta["inversion_family"]) == (task.type_id, task.family)
        assert (meta["repository"], meta["commit"], meta["difficulty"]) == (task.repo, task.commit, task.difficulty)
        assert meta["miner_version"] and meta["category"] and meta["tags"]
        assert config["verifier"]["timeout_sec"] >= 120 and config["agent"]["timeout_sec"] >= 900
        assert config["environment"]["build_timeout_sec"] > 0 and config["environment"]["memory_mb"] > 0
        dockerfile = (folder / "environment" / "Dockerfile").read_text()
        assert dockerfile.splitlines()[2] == "FROM miner/base:bookworm AS healthy"
        assert "COPY break.sh /tmp/break.sh" in dockerfile and "rm -f /tmp/break.sh" in dockerfile
        assert "tests" not in dockerfile.replace("/sandbox/.build", "") and "solution" not in dockerfile
        assert (folder / "environment" / "break.sh").read_text() == task.break_script
        assert task.fix_script.strip() in (folder / "solution" / "solve.sh").read_text()
        assert (folder / "instruction.md").read_text().strip() == task.instruction.strip()
        spec = json.loads((folder / "tests" / "spec.json").read_text())
        assert (spec["f2p"], spec["p2p"], spec["protected"]) == (task.f2p, task.p2p, task.protected)
        for rel, info in spec["originals"].items():
            data = (folder / "tests" / "originals" / rel).read_bytes()
            assert hashlib.sha256(data).hexdigest() == info["sha256"]
        target = task.target.path or ""
        assert not any(target.endswith(rel) for rel in spec["originals"]), "the break's target is never restored"
        test_files = {t.split("::")[0] for t in task.f2p + task.p2p if not t.startswith("probe::")}
        assert test_files <= set(spec["originals"])
        with tarfile.open(folder / "environment" / "project.tar.gz") as tar:
            names = tar.getnames()
        assert not any("/.git/" in n or n.endswith("/.git") for n in names)
        compose = yaml.safe_load((folder / "environment" / "docker-compose.yaml").read_text())
        assert compose["services"]["main"]["cap_drop"] == ["ALL"]
        # rule 8: the evidence, and the network only for a repair that needs the index
        assert meta["evidence"] == [str(e) for e in task.evidence] and meta["evidence_kinds"]
        online = needs_network(meta["evidence_kinds"])
        assert (meta["repair_network"], bool(meta["allowed_hosts"])) == (("allowlist", True) if online
                                                                        else ("none", False))
        assert compose["services"]["main"].get("network_mode") == (None if online else "none")
        assert "network_mode" not in config["environment"]  # declared for Harbor only when asked


@pytest.mark.docker
def test_export_again_is_idempotent(store: Store, harbor_export, export_cache: Path) -> None:
    chosen, out = harbor_export.chosen, harbor_export.out
    before = tree_digest(out)
    again = export_tasks(store, list(chosen.values()), "harbor", out, ExportOptions(cache_dir=export_cache))
    assert {o.status for o in again.outcomes} == {"kept"}
    rewritten = export_tasks(store, list(chosen.values()), "harbor", out,
                             ExportOptions(cache_dir=export_cache, overwrite=True))
    assert {o.status for o in rewritten.outcomes} == {"unchanged"}
    assert rewritten.images_built == 0  # manifests come from the cache
    assert tree_digest(out) == before


@pytest.mark.docker
def test_exported_image_holds_no_answer(harbor_export) -> None:
    """The built environment has no break script, build files, tests, solution or git history."""
    chosen, out, summary = harbor_export.chosen, harbor_export.out, harbor_export.summary
    task = chosen["data"] if "data" in chosen else next(iter(chosen.values()))
    folder = out / next(o.name for o in summary.outcomes if o.task_id == task.id)
    checker = Checker()
    image = checker.build(folder, read_config(folder))
    try:
        container = checker.start(image, folder)
        try:
            code, listing = container.exec_run(["bash", "-c", "ls -a /tmp /sandbox; ls -d /tests /solution "
                                                "/sandbox/.build /sandbox/project/.git 2>&1; true"])
            text = listing.decode()
            assert "break.sh" not in text and ".build\n" not in text
            assert text.count("No such file or directory") == 4, text
        finally:
            container.remove(force=True)
    finally:
        checker.client.images.remove(image, force=True)


def test_select_tasks_filters(mined_store: Path) -> None:
    with Store(mined_store, create=False) as opened:
        everything = opened.list_tasks()
        families = sorted({t.family for t in everything})
        some = select_tasks(opened, [families[0]])
        assert some and {t.family for t in some} == {families[0]}
        exact = select_tasks(opened, [everything[0].type_id, families[0]])
        assert {t.id for t in exact} == {t.id for t in everything if t.type_id == everything[0].type_id
                                          or t.family == families[0]}
        assert len(select_tasks(opened, [], limit=2)) == 2
        repo = everything[0].repo
        assert {t.repo for t in select_tasks(opened, [], repo=repo)} == {repo}
        level = everything[0].difficulty
        assert {t.difficulty for t in select_tasks(opened, [], difficulty=level)} == {level}
        offline = select_tasks(opened, [], offline=True)
        assert offline and all(t.evidence and not needs_network([e.kind for e in t.evidence]) for t in offline)
        assert {t.family for t in select_tasks(opened, [], evidence=["package-index"])} == {"deps"}
        assert {t.id for t in offline} | {t.id for t in select_tasks(opened, [], evidence=["package-index"])} == \
            {t.id for t in everything}


def copy_store(root: Path, dest: Path) -> Path:
    """A copy of a store without its sandboxes (work/): exports may write to its cache."""
    import shutil

    shutil.copytree(root, dest, ignore=lambda folder, names: ["work"] if Path(folder) == root else [])
    return dest


@pytest.mark.docker
def test_cli_export_filters_progress_summary_and_rerun(mined_store: Path, tmp_path: Path) -> None:
    root = copy_store(mined_store, tmp_path / "store")
    with Store(root, create=False) as opened:
        task = opened.list_tasks()[0]
    env = {"MINER_STORE": str(root), "COLUMNS": "200"}
    args = ["export", "--format", "harbor", "--out", str(tmp_path / "out"), "--type", task.type_id,
            "--repo", task.repo, "--difficulty", task.difficulty, "--limit", "1", "--org", "acme"]
    runner = CliRunner()
    first = runner.invoke(main, args, env=env)
    second = runner.invoke(main, args, env=env)
    assert first.exit_code == 0, first.output
    assert "written" in first.output and "1 task(s)" in first.output
    folders = list((tmp_path / "out").iterdir())
    assert len(folders) == 1
    assert tomllib.loads((folders[0] / "task.toml").read_text())["task"]["name"] == f"acme/{folders[0].name}"
    assert second.exit_code == 0 and "kept" in second.output
    nothing = runner.invoke(main, ["export", "--format", "harbor", "--out", str(tmp_path / "o2"), "--type", "nope"],
                            env=env)
    assert nothing.exit_code != 0 and "unknown inversion type or family 'nope'" in nothing.output
    nothing = runner.invoke(main, ["export", "--format", "harbor", "--out", str(tmp_path / "o2"), "--type", "fs",
                                   "--repo", "no-such-repo"], env=env)
    assert nothing.exit_code != 0 and "no project in the store matches" in nothing.output


def odd_task_store(mined_store: Path, root: Path) -> Task:
    """A store at root holding one mined task whose test command is not plain pytest."""
    with Store(mined_store, create=False) as opened:
        task = opened.list_tasks()[0]
        key = content_id(task.repo, task.commit, task.source.overrides)
        state = opened.healthy(key)
    odd = task.model_copy(update={"id": "0" * 16, "test_command": "make check"})
    with Store(root) as other:
        other.record_project(key, odd.repo, odd.commit, odd.source.raw, odd.source.origin, "mined", healthy=state)
        other.add_task(odd, {"break.sh": odd.break_script, "fix.sh": odd.fix_script})
    return odd


def test_a_task_without_a_plain_pytest_command_exports_to_jsonl(mined_store: Path, tmp_path: Path) -> None:
    odd = odd_task_store(mined_store, tmp_path / "store")
    with Store(tmp_path / "store") as other:
        summary = export_tasks(other, [odd], "jsonl", tmp_path / "out", ExportOptions(cache_dir=tmp_path / "c"))
    assert summary.outcomes[0].status == "written"  # jsonl needs no verifier


@pytest.mark.docker
def test_a_task_that_cannot_be_exported_is_reported(mined_store: Path, tmp_path: Path) -> None:
    """A task whose test command is not plain pytest fails alone, with the reason; the CLI exits non-zero."""
    odd = odd_task_store(mined_store, tmp_path / "store")
    with Store(tmp_path / "store") as other:
        summary = export_tasks(other, [odd], "harbor", tmp_path / "out", ExportOptions(cache_dir=tmp_path / "c"))
    assert summary.failed and "make check" in summary.failed[0].reason
    result = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "export", "--format", "harbor",
                                       "--out", str(tmp_path / "o")], env={"COLUMNS": "200"})
    assert result.exit_code != 0 and "could not be exported" in result.output


@pytest.mark.docker
def test_tests_the_healthy_image_does_not_pass_judge_nothing(store: Store, harbor_export, export_cache: Path,
                                                              tmp_path: Path) -> None:
    """The healthy image is not the mining sandbox (another patch release of Python, another
    system): a P2P test that does not pass there is dropped from the verifier's spec and named in
    the metadata; F2P tests are kept. Here a test that does not exist stands for one the image fails."""
    from miner.check import read_config

    task = harbor_export.chosen["config"]
    gone = "tests/test_gone.py::test_never_collected"
    with_p2p = task.model_copy(update={"p2p": [*task.p2p, gone]})
    with_f2p = task.model_copy(update={"id": "f" * 16, "f2p": [*task.f2p, gone]})
    summary = export_tasks(store, [with_p2p, with_f2p], "harbor", tmp_path / "out",
                           ExportOptions(cache_dir=export_cache))
    [written] = [o for o in summary.outcomes if o.status == "written" and o.task_id == with_p2p.id]
    spec = json.loads((tmp_path / "out" / written.name / "tests" / "spec.json").read_text())
    assert gone not in spec["p2p"] and spec["p2p"] == task.p2p
    assert read_config(tmp_path / "out" / written.name)["metadata"]["p2p_not_passing_in_image"] == [gone]
    assert not summary.failed  # an F2P test is never dropped: the verifier's own run judges it


def test_jsonl_records(mined_store: Path, tmp_path: Path) -> None:
    with Store(mined_store, create=False) as opened:
        tasks = opened.list_tasks()
        out = tmp_path / "out"
        summary = export_tasks(opened, tasks, "jsonl", out, ExportOptions(cache_dir=tmp_path / "c"))
        first = (out / "tasks.jsonl").read_bytes()
        again = export_tasks(opened, tasks, "jsonl", out, ExportOptions(cache_dir=tmp_path / "c"))
    assert {o.status for o in summary.outcomes} == {"written"}
    assert {o.status for o in again.outcomes} == {"unchanged"} and (out / "tasks.jsonl").read_bytes() == first
    records = [json.loads(line) for line in first.decode().splitlines()]
    assert len(records) == len(tasks) == len({r["instance_id"] for r in records})
    by_commit = {(t.repo, t.commit, t.type_id, json.dumps(t.f2p)): t for t in tasks}
    for record in records:
        assert isinstance(record["FAIL_TO_PASS"], str) and isinstance(record["PASS_TO_PASS"], str)
        task = by_commit[(record["repo"], record["base_commit"], record["inversion_type"], record["FAIL_TO_PASS"])]
        assert json.loads(record["PASS_TO_PASS"]) == task.p2p
        assert record["problem_statement"] == task.instruction and record["difficulty"] == task.difficulty
        assert record["break_script"] == task.break_script and record["fix_script"] == task.fix_script
        assert "COPY . /sandbox/project/" in record["dockerfile"] and "base64 -d" in record["dockerfile"]
        assert record["evidence"] == [str(e) for e in task.evidence]
        assert record["evidence_kinds"] == sorted({e.kind for e in task.evidence})
        assert bool(record["allowed_hosts"]) == needs_network(record["evidence_kinds"])


def test_jsonl_records_to_standard_output(mined_store: Path, tmp_path: Path) -> None:
    """`-o -`: the records alone on standard output (the summary on stderr), as the file holds them."""
    root = copy_store(mined_store, tmp_path / "store")
    piped = run_miner(root, "export", "--format", "jsonl", "-o", "-")
    assert piped.returncode == 0, piped.stderr
    written = run_miner(root, "export", "--format", "jsonl", "-o", tmp_path / "out")
    assert written.returncode == 0, written.stderr
    assert piped.stdout == (tmp_path / "out" / "tasks.jsonl").read_text()
    assert "jsonl export to standard output" in piped.stderr


@pytest.mark.docker
def test_jsonl_dockerfile_builds_the_broken_environment_from_a_checkout(mined_store: Path, tmp_path: Path) -> None:
    """The record's Dockerfile, with the project folder as build context, gives the broken state."""
    with Store(mined_store, create=False) as opened:
        task = next(t for t in opened.list_tasks() if t.family == "config")
        export_tasks(opened, [task], "jsonl", tmp_path / "out", ExportOptions(cache_dir=tmp_path / "c"))
    record = json.loads((tmp_path / "out" / "tasks.jsonl").read_text().splitlines()[0])
    import shutil

    fetched = next((tmp_path / "c" / "sources").rglob("pyproject.toml")).parent
    context = tmp_path / "checkout"
    shutil.copytree(fetched, context)
    text = record["dockerfile"]
    settings = images.host_pip_settings()
    if settings.cert:  # this machine's pip needs its CA inside builds, as every exported Dockerfile gets
        shutil.copyfile(settings.cert, context / images.HOST_CA_NAME)
        text = text.replace("USER root\n", f"USER root\nCOPY {images.HOST_CA_NAME} {images.HOST_CA_PATH}\n"
                                            f"ENV PIP_CERT={images.HOST_CA_PATH}\n", 1)
    (tmp_path / "Dockerfile").write_text(text)
    client = images.docker_client()
    image, _ = client.images.build(path=str(context), dockerfile=str(tmp_path / "Dockerfile"), rm=True,
                                   labels=images.labels("broken", test="1"))
    try:
        target = task.target.path or ""
        rel = target.removeprefix("/sandbox/project/")
        script = f"cd /sandbox/project && sha256sum {shlex.quote(rel)} 2>&1; ls /tmp /sandbox"
        out = client.containers.run(image.id, ["bash", "-c", script], remove=True).decode()
        healthy = hashlib.sha256((context / rel).read_bytes()).hexdigest()
        assert healthy not in out, "the break ran in the image"
        assert "break.sh" not in out and ".build" not in out
    finally:
        client.images.remove(image.id, force=True)


@pytest.mark.docker
def test_terminal_bench_layout(mined_store: Path, tmp_path: Path, export_cache: Path) -> None:
    with Store(mined_store, create=False) as opened:
        task = opened.list_tasks()[0]
        summary = export_tasks(opened, [task], "terminal-bench", tmp_path, ExportOptions(cache_dir=export_cache))
    folder = tmp_path / summary.outcomes[0].name
    data = yaml.safe_load((folder / "task.yaml").read_text())
    required = {"instruction", "author_name", "author_email", "category", "tags", "difficulty", "parser_name",
                "expert_time_estimate_min", "junior_time_estimate_min"}
    assert required <= set(data) and data["parser_name"] == "pytest"
    dockerfile = (folder / "Dockerfile").read_text()
    for hidden in ("solution.sh", "run-tests.sh", "test_outputs.py"):
        assert hidden not in dockerfile
    assert "tmux asciinema" in dockerfile and "COPY environment/break.sh" in dockerfile
    compose = yaml.safe_load((folder / "docker-compose.yaml").read_text())
    assert "client" in compose["services"]
    run_tests = (folder / "run-tests.sh").read_text()
    assert "--summary-line" in run_tests and "--no-kill" in run_tests
    assert (folder / "tests" / "verifier.py").is_file() and (folder / "solution.sh").is_file()
    # Run it as the TB1 harness does: tests/ and run-tests.sh copied to $TEST_DIR, the oracle's
    # solution.sh run first in the second container; the pytest parser reads the summary line.
    client = images.docker_client()
    image, _ = client.images.build(path=str(folder), rm=True, labels=images.labels("broken", test="tb1"))
    try:
        for solve, verdict in ((False, "FAILED"), (True, "PASSED")):
            container = client.containers.run(image.id, ["sh", "-c", "sleep infinity"], detach=True, cap_drop=["ALL"],
                                              environment={"TEST_DIR": "/tests"})
            try:
                from miner.sandbox.docker.gateway import tar_folder

                container.put_archive("/", tar_folder(folder / "tests", "tests"))
                if solve:
                    container.put_archive("/", tar_folder(folder, "oracle"))
                    assert container.exec_run(["bash", "/oracle/solution.sh"]).exit_code == 0
                container.put_archive("/tests", tar_folder(folder / "run-tests.sh", "run-tests.sh"))
                out = container.exec_run(["bash", "/tests/run-tests.sh"]).output.decode()
                summary = out.split("short test summary info")[-1]
                assert f"{verdict} tests/verifier.py::test_environment_repaired" in summary, out[-1500:]
            finally:
                container.remove(force=True)
    finally:
        client.images.remove(image.id, force=True)


# -- attacks on the verifier -----------------------------------------------------------------------



def write(path: str, text: str, append: bool = False) -> str:
    """A shell line writing text to path (base64, so any quoting survives)."""
    import base64

    blob = base64.b64encode(text.encode()).decode()
    return f"echo {blob} | base64 -d {'>>' if append else '>'} {path}"


ATTACKS = {
    "conftest-added": write("/sandbox/project/conftest.py", FORCE_PASS),
    "conftest-in-tests-edited": 'for f in $(find . -name conftest.py -not -path "./.git/*"); do '
                                + write("$f", FORCE_PASS, append=True)
                                + "; done; [ -n \"$(find . -name conftest.py)\" ] || "
                                + write("tests/conftest.py", FORCE_PASS),
    "pytest-plugin-installed": "; ".join([
        write("$MINER_SITE_PACKAGES/miner_evil_plugin.py", FORCE_PASS),
        "mkdir -p $MINER_SITE_PACKAGES/miner_evil_plugin-1.0.dist-info",
        write("$MINER_SITE_PACKAGES/miner_evil_plugin-1.0.dist-info/METADATA",
              "Metadata-Version: 2.1\nName: miner-evil-plugin\nVersion: 1.0\n"),
        write("$MINER_SITE_PACKAGES/miner_evil_plugin-1.0.dist-info/entry_points.txt",
              "[pytest11]\nevil = miner_evil_plugin\n"),
        write("$MINER_SITE_PACKAGES/miner_evil_plugin-1.0.dist-info/RECORD", "miner_evil_plugin.py,,\n"),
    ]),
    "pth-file-added": write("$MINER_SITE_PACKAGES/zz_miner_evil.py", FORCE_PASS) + "; "
                      + write("$MINER_SITE_PACKAGES/zz_miner_evil.pth", "import zz_miner_evil\n"),
    "sitecustomize-edited": 'f=$(readlink -f "$($MINER_PYTHON -c '
                            '"import sitecustomize; print(sitecustomize.__file__)")"); '
                            + write("$f", "\ntry:\n" + textwrap.indent(FORCE_PASS, "    ")
                                    + "except ImportError:\n    pass\n", append=True),
    "pytest-source-modified": 'f=$($MINER_PYTHON -c "import _pytest.reports as r; print(r.__file__)"); '
                              + write("$f", FORCE_PASS, append=True),
    "pytest-bytecode-forged": 'f=$($MINER_PYTHON -c "import _pytest.reports as r; print(r.__file__)"); '
                              "cp $f /tmp/evil.py; " + write("/tmp/evil.py", FORCE_PASS, append=True) + "; "
                              '$MINER_PYTHON -c "import py_compile, importlib.util, sys; '
                              "py_compile.compile('/tmp/evil.py', cfile=importlib.util.cache_from_source(sys.argv[1]), "
                              "dfile=sys.argv[1], "
                              "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\" $f",
    "test-marked-skipped": "for f in F2P_FILES; do "
                           "sed -i 's/^def test_/@pytest.mark.skip\\ndef test_/; 1i import pytest' $f; done",
    "test-files-deleted": "rm -f F2P_FILES",
    "test-files-renamed": "for f in F2P_FILES; do mv $f ${f%.py}_off.py.bak; done",
    "source-edited": 'f=$($MINER_PYTHON -c "import MODULE; print(MODULE.__file__)"); '
                     + write("$f", "\ntry:\n" + textwrap.indent(FORCE_PASS, "    ")
                             + "except ImportError:\n    pass\n", append=True),
    "pytest-addopts-in-env-file": write("/sandbox/project/miner_evil_opts.py", FORCE_PASS) + "; "
                                  + write("/sandbox/home/.bashrc", "export PYTEST_ADDOPTS='-p miner_evil_opts'\n",
                                          append=True),
}
# Why the verifier refuses each attack: a problem it names, or (None) the tests it put back or
# ran untampered simply fail, since the environment is still broken.
REFUSED_BECAUSE = {
    "conftest-added": "conftest.py was added",
    "conftest-in-tests-edited": None,
    "pytest-plugin-installed": "pytest plugin entry point",
    "pth-file-added": "a .pth file runs code",
    "sitecustomize-edited": "sitecustomize",
    "pytest-source-modified": "test runner file",
    "pytest-bytecode-forged": None,
    "test-marked-skipped": None,
    "test-files-deleted": None,
    "test-files-renamed": None,
    "source-edited": "protected file",
    "pytest-addopts-in-env-file": None,
}
# Attacks whose effect a naive verifier (plain `python -m pytest` of the F2P ids, exit code or
# junit outcomes) would take for a repair: the control check proves the attack is real.
NAIVE_EXIT_ZERO = {"test-marked-skipped", "test-files-deleted", "test-files-renamed"}


def fooled_by_a_patched_pytest(store: Store, task: Task) -> tuple[str | None, list[str]]:
    """(the project's package, the F2P ids a force-pass patch can flip): tests that fail at call
    time (not at collection) in modules importing the package in-process."""
    module = next((p.module for p in task.probes if p.kind == "import" and p.module), None)
    broken = json.loads((store.task_dir(task.id) / "broken.json").read_text())["outcomes"]
    ids = []
    for test_id in (t for t in task.f2p if not t.startswith("probe::") and broken.get(t) == "failed"):
        source = Path(task.repo) / test_id.split("::")[0]  # the fixtures are local folders
        text = source.read_text() if source.is_file() else ""
        if module and (f"import {module}" in text or f"from {module}" in text):
            ids.append(test_id)
    return module, ids


@pytest.fixture(scope="module")
def attack_target(store: Store, export_cache: Path, tmp_path_factory: pytest.TempPathFactory):
    """(folder, image id, F2P ids, checker, placeholders) of one exported task, built once.

    The F2P ids are those a patched pytest can flip to "passed" in a naive run (the control half
    of each attack test); a config task is preferred.
    """
    ordered = sorted(store.list_tasks(), key=lambda t: t.family != "config")
    task = next((t for t in ordered if fooled_by_a_patched_pytest(store, t)[1]), None)
    assert task is not None, "no mined task has an F2P test failing in-process"
    module, f2p = fooled_by_a_patched_pytest(store, task)
    out = tmp_path_factory.mktemp("attacked")
    # the shared mode: the attacks run in the container the verifier then runs in (the separate
    # mode's fresh container is checked against the whole catalogue by test_attacks.py)
    options = ExportOptions(cache_dir=export_cache, verifier_mode="shared")
    summary = export_tasks(store, [task], "harbor", out, options)
    assert not summary.failed, summary.failed
    folder = out / summary.outcomes[0].name
    checker = Checker(verifier_mode="shared")
    image = checker.build(folder, read_config(folder))
    files = {t.split("::")[0] for t in task.f2p if not t.startswith("probe::")}
    places = {"F2P_FILES": " ".join(sorted(shlex.quote(f) for f in files)), "MODULE": module}
    yield folder, image, f2p, checker, places
    checker.client.images.remove(image, force=True)


def in_sandbox(container, script: str) -> str:
    code, out = container.exec_run(["bash", "-c", f"source /sandbox/home/.bashrc; cd /sandbox/project; {script}"])
    return out.decode(errors="replace")


def naive_outcomes(container, ids: list[str]) -> dict[str, str]:
    """What a naive verifier sees: the junit outcomes of a plain `python -m pytest IDS`."""
    quoted = " ".join(shlex.quote(i) for i in ids)
    in_sandbox(container, "python -m pytest -p no:cacheprovider -q -o junit_family=xunit1 "
                          f"--junitxml=/tmp/naive.xml {quoted} >/dev/null 2>&1; true")
    data = read_file(container, "/tmp/naive.xml")
    return {k: v.outcome for k, v in parse_junit(data).items()} if data else {}


def naive_exit_code(container) -> int:
    """The exit code of a plain whole-suite `python -m pytest` (what an exit-code verifier reads)."""
    return int(in_sandbox(container, "python -m pytest -p no:cacheprovider -q >/dev/null 2>&1; echo $?").split()[-1])


@pytest.mark.docker
def test_untouched_broken_environment_scores_zero_and_fails_naively(attack_target) -> None:
    """The baseline the attacks start from: F2P fails, so the reward is 0 honestly."""
    folder, image, f2p, checker, _ = attack_target
    container = checker.start(image, folder)
    try:
        outcomes = naive_outcomes(container, f2p)
        assert naive_exit_code(container) != 0 and any(outcomes.get(t) != "passed" for t in f2p)
        result = checker.verify(container, folder, read_config(folder), image)
        assert result.reward == 0 and not result.problems
    finally:
        container.remove(force=True)


@pytest.mark.docker
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero(attack_target, attack: str) -> None:
    folder, image, f2p, checker, places = attack_target
    script = ATTACKS[attack]
    for key, value in places.items():
        script = script.replace(key, value)
    container = checker.start(image, folder)
    try:
        in_sandbox(container, script)
        if attack in NAIVE_EXIT_ZERO:
            assert naive_exit_code(container) == 0, f"control: {attack} should make a whole-suite run exit 0"
        else:
            outcomes = naive_outcomes(container, f2p)
            assert all(outcomes.get(t) == "passed" for t in f2p), f"control: {attack} should fool pytest: {outcomes}"
        result = checker.verify(container, folder, read_config(folder), image)
        assert result.reward == 0, result.output[-2000:]
        reason = REFUSED_BECAUSE[attack]
        if reason is None:
            assert not result.problems and set(f2p) & set(result.failing), result.output[-2000:]
        else:
            assert any(reason in problem for problem in result.problems), result.problems
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_reward_writer_left_running_is_killed(attack_target) -> None:
    folder, image, _, checker, _ = attack_target
    container = checker.start(image, folder)
    try:
        container.exec_run(["bash", "-c", "nohup sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; "
                                          "sleep 0.05; done' >/dev/null 2>&1 &"], detach=True)
        import time

        seen = []
        for _ in range(20):  # control: the writer runs (a read can fall between its truncate and write)
            time.sleep(0.25)
            seen.append(read_file(container, "/logs/verifier/reward.txt").strip())
            if seen[-1] == b"1":
                break
        assert seen[-1] == b"1", seen
        result = checker.verify(container, folder, read_config(folder), image)
        time.sleep(1)
        assert result.reward == 0 and "killed" in result.output
        assert read_file(container, "/logs/verifier/reward.txt").strip() == b"0"
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_planted_reward_json_is_removed(attack_target) -> None:
    """Harbor reads reward.json before reward.txt: one planted by the agent must not survive."""
    folder, image, _, checker, _ = attack_target
    container = checker.start(image, folder)
    try:
        in_sandbox(container, "echo '{\"reward\": 1}' > /logs/verifier/reward.json")
        result = checker.verify(container, folder, read_config(folder), image)
        assert result.reward == 0 and read_file(container, "/logs/verifier/reward.json") is None
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_replaced_interpreter_scores_zero(attack_target) -> None:
    """A fake /usr/bin/python3 that just writes 1 never runs: the boot tool runs the healthy
    interpreter's real file, and the changed /usr/bin is a system change."""
    folder, image, _, checker, _ = attack_target
    container = checker.start(image, folder)
    try:
        fake = "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"
        in_sandbox(container, "rm -f /usr/bin/python3 && " + write("/usr/bin/python3", fake)
                   + " && chmod +x /usr/bin/python3")
        in_sandbox(container, "/usr/bin/python3; cp /logs/verifier/reward.txt /tmp/control")
        assert read_file(container, "/tmp/control").strip() == b"1"  # control: the fake would score 1
        result = checker.verify(container, folder, read_config(folder), image)
        assert result.reward == 0 and any("/usr/bin differs from the healthy image" in p for p in result.problems)
    finally:
        container.remove(force=True)


def test_a_break_of_a_runtime_variable_is_seen_by_the_verifier() -> None:
    """The verifier holds PYTHONHOME, PYTHONOPTIMIZE, ... at their healthy values while the tests run,
    but for those the task's break sets: every catalogue break exporting one names it in the spec."""
    import re

    from miner.assets.verifier import SENSITIVE_ENV
    from miner.catalogue import load_catalogue
    from miner.export.common import broken_variables

    exported = re.compile(r"export (\w+)=")
    for itype in load_catalogue().values():
        for name in set(exported.findall(itype.break_script)) & set(SENSITIVE_ENV):
            assert name in broken_variables(itype.break_script), itype.id
    assert broken_variables(load_catalogue()["env/pythonhome"].break_script) == ["PYTHONHOME"]
