"""Tests of the `miner` command line: in process (CliRunner) and as the installed command."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from miner import __version__
from miner.cli import main
from miner.models import Candidate, Evidence, Inversion, Source, Target, Task, content_id
from miner.store import Store

GREETER = "https://example.org/acme/greeter.git"
TABULATE = "pypi:tabulate"


def make_task(n: int, type_id: str, repo: str, f2p: int, p2p: int) -> Task:
    family, name = type_id.split("/")
    return Task(
        id=content_id("cli", repo, type_id, n),
        repo=repo,
        commit="c0ffee",
        source=Source(raw=repo, kind="git", location=repo, origin="repos.txt:1"),
        type_id=type_id,
        family=family,
        target=Target(kind="distribution", name=f"dist{n}"),
        summary=f"{name} dist{n}",
        break_script=f"#!/bin/bash\npip uninstall -y dist{n}\n",
        fix_script=f"#!/bin/bash\npip install dist{n}\n",
        f2p=[f"tests/test_x.py::test_f{i}" for i in range(f2p)],
        p2p=[f"tests/test_x.py::test_p{i}" for i in range(p2p)],
        instruction=f"Importing dist{n} fails; repair the environment.",
        evidence=[Evidence(kind="reversible", detail="the appended line") if family == "config"
                  else Evidence(kind="package-index", detail=f"dist{n}==1.0")],
    )


def make_candidate(n: int, type_id: str, repo: str, rule: str | None) -> Candidate:
    inv = Inversion(
        type_id=type_id, family=type_id.split("/")[0], target=Target(kind="distribution", name="d"),
        break_script=f"echo {n}", fix_script="true", summary="s",
    )
    return Candidate(
        id=content_id("cand", n), repo=repo, commit="c0ffee", inversion=inv,
        status="rejected" if rule else "validated", rule=rule,
    )


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    root = tmp_path / "mined"
    tasks = [
        make_task(1, "deps/uninstall", GREETER, f2p=2, p2p=5),
        make_task(2, "deps/wrong-version", GREETER, f2p=1, p2p=6),
        make_task(3, "config/syntax-error", TABULATE, f2p=3, p2p=0),
    ]
    with Store(root) as store:
        for task in tasks:
            store.add_task(task, {"break.sh": task.break_script, "fix.sh": task.fix_script,
                                  "instruction.md": task.instruction, "logs/break.log": "gone\n"})
        for n, (type_id, repo, rule) in enumerate([
            ("deps/uninstall", GREETER, None),
            ("deps/wrong-version", GREETER, None),
            ("deps/uninstall", GREETER, "no-p2p"),
            ("config/syntax-error", TABULATE, None),
            ("config/syntax-error", TABULATE, "no-f2p"),
        ]):
            store.record_candidate(content_id(repo), make_candidate(n, type_id, repo, rule))
        store.record_project(content_id(GREETER), GREETER, "c0ffee", GREETER, "repos.txt:1", "mined")
    return root


def run(*args: str, env: dict[str, str] | None = None) -> click.testing.Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_tasks_list_json(store_root: Path) -> None:
    result = run("--store", str(store_root), "tasks", "list", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 3
    by_type = {r["type"]: r for r in rows}
    uninstall = by_type["deps/uninstall"]
    assert uninstall["id"] == content_id("cli", GREETER, "deps/uninstall", 1)
    assert (uninstall["family"], uninstall["repo"], uninstall["commit"]) == ("deps", GREETER, "c0ffee")
    assert uninstall["target"] == "distribution:dist1"
    assert uninstall["difficulty"] == "medium"
    assert (uninstall["f2p_count"], uninstall["p2p_count"]) == (2, 5)
    assert by_type["config/syntax-error"]["f2p_count"] == 3
    assert uninstall["evidence"] == [{"kind": "package-index", "detail": "dist1==1.0"}]


@pytest.mark.parametrize(
    ("args", "types"),
    [
        (["--type", "deps/uninstall"], {"deps/uninstall"}),
        (["--type", "deps"], {"deps/uninstall", "deps/wrong-version"}),
        (["--repo", "tabulate"], {"config/syntax-error"}),
        (["--repo", GREETER, "--type", "deps/wrong-version"], {"deps/wrong-version"}),
        (["--type", "fs"], set()),
        (["--evidence", "reversible"], {"config/syntax-error"}),
        (["--evidence", "package-index", "--evidence", "reversible"],
         {"deps/uninstall", "deps/wrong-version", "config/syntax-error"}),
        (["--offline"], {"config/syntax-error"}),
        (["--offline", "--type", "deps"], set()),
        (["--evidence", "published-source"], set()),
    ],
)
def test_tasks_list_filters(store_root: Path, args: list[str], types: set[str]) -> None:
    result = run("--store", str(store_root), "tasks", "list", "--json", *args)
    assert result.exit_code == 0, result.output
    assert {r["type"] for r in json.loads(result.output)} == types


def test_tasks_list_table(store_root: Path) -> None:
    result = run("--store", str(store_root), "tasks", "list", "--type", "deps")
    assert result.exit_code == 0, result.output
    assert "2 task(s)" in result.output and "package-index" in result.output
    assert content_id("cli", GREETER, "deps/uninstall", 1) in result.output
    assert content_id("cli", TABULATE, "config/syntax-error", 3) not in result.output


def test_tasks_show(store_root: Path) -> None:
    task_id = content_id("cli", GREETER, "deps/uninstall", 1)
    result = run("--store", str(store_root), "tasks", "show", task_id[:12], "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["id"] == task_id
    assert shown["break_script"] == "#!/bin/bash\npip uninstall -y dist1\n"
    assert shown["f2p"] == ["tests/test_x.py::test_f0", "tests/test_x.py::test_f1"]
    assert Path(shown["path"]) == (store_root / "tasks" / task_id).resolve()
    assert shown["files"] == ["break.sh", "fix.sh", "instruction.md", "logs/break.log", "task.json"]
    assert shown["evidence"] == [{"kind": "package-index", "detail": "dist1==1.0"}]

    wide = {"COLUMNS": "300"}  # rich wraps at the terminal width; keep the folder on one line
    text = run("--store", str(store_root), "tasks", "show", task_id, env=wide).output
    for expected in (task_id, "pip uninstall -y dist1", "pip install dist1", "package-index: dist1==1.0",
                     "Importing dist1 fails", str(store_root.resolve() / "tasks" / task_id)):
        assert expected in text


def test_unknown_and_ambiguous_task_ids(store_root: Path) -> None:
    result = run("--store", str(store_root), "tasks", "show", "not-a-task")
    assert result.exit_code == 1
    assert "no task with id 'not-a-task'" in result.output
    assert run("--store", str(store_root), "tasks", "show", "").exit_code == 1
    # 20 hex ids: by pigeonhole two share their first character, an ambiguous prefix
    with Store(store_root) as store:
        for n in range(10, 27):
            task = make_task(n, "deps/uninstall", GREETER, f2p=1, p2p=1)
            store.add_task(task, {})
        ids = [t.id for t in store.list_tasks()]
    shared = next(i[0] for i in ids if sum(j.startswith(i[0]) for j in ids) > 1)
    ambiguous = run("--store", str(store_root), "tasks", "show", shared)
    assert ambiguous.exit_code == 1 and "ambiguous" in ambiguous.output


@pytest.mark.parametrize("verb", [["tasks", "list"], ["tasks", "show", "abc"], ["stats"]])
def test_missing_store(tmp_path: Path, verb: list[str]) -> None:
    missing = tmp_path / "nothing-here"
    result = run("--store", str(missing), *verb)
    assert result.exit_code == 1
    assert f"no store at {missing.resolve()}" in result.output
    assert "miner crawl" in result.output
    assert not missing.exists()  # looking must not create a store


def test_stats(store_root: Path) -> None:
    result = run("--store", str(store_root), "stats", "--json")
    assert result.exit_code == 0, result.output
    numbers = json.loads(result.output)
    assert (numbers["tried"], numbers["validated"], numbers["rejected"]) == (5, 3, 2)
    assert isinstance(numbers["tried"], int) and isinstance(numbers["validated"], int)
    assert numbers["by_rule"] == {"no-p2p": 1, "no-f2p": 1}
    assert numbers["by_type"]["deps/uninstall"]["yield"] == pytest.approx(0.5)
    assert numbers["by_project"][GREETER]["status"] == "mined"

    table = run("--store", str(store_root), "stats").output
    for expected in ("per inversion type", "per project", "rejected by rule", "no-p2p", "60.0%"):
        assert expected in table


def test_store_from_environment(store_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("stats", "--json", env={"MINER_STORE": str(store_root)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["tried"] == 5
    default = run("stats")  # ./mined under tmp_path is the fixture's store
    assert default.exit_code == 0 and "per project" in default.output
    monkeypatch.chdir(store_root)
    assert "no store at" in run("stats").output  # ./mined does not exist here


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += all_commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


def test_every_command_has_help() -> None:
    commands = all_commands(main)
    assert {("tasks", "list"), ("tasks", "show"), ("stats",), ("inversions",)} <= set(commands)
    for path in commands:
        result = run(*path, "--help")
        assert result.exit_code == 0, path
        assert "Usage: main" in result.output or "Usage: miner" in result.output
        assert "--help" in result.output


def test_version() -> None:
    assert run("--version").output.strip() == f"miner, version {__version__}"


def test_installed_command(store_root: Path, tmp_path: Path) -> None:
    exe = shutil.which("miner")
    assert exe, "the miner command is not installed (pip install -e .)"
    listed = subprocess.run([exe, "--store", str(store_root), "tasks", "list", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3
    missing = subprocess.run([exe, "--store", str(tmp_path / "none"), "stats"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1
    assert "no store at" in missing.stderr and missing.stdout == ""


def test_inversions_lists_the_catalogue() -> None:
    from miner.catalogue import load_catalogue

    catalogue = load_catalogue()
    assert catalogue, "the shipped catalogue is empty"
    result = run("inversions", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["id"] for r in rows] == sorted(catalogue)
    assert all(r["break_script"] == catalogue[r["id"]].break_script for r in rows)

    family = rows[0]["family"]
    only = json.loads(run("inversions", "--json", "--family", family).output)
    assert only and {r["family"] for r in only} == {family}
    assert {r["id"] for r in only} == {k for k, v in catalogue.items() if v.family == family}

    table = run("inversions", "--family", family).output
    assert rows[0]["id"] in table

    unknown = run("inversions", "--family", "no-such-family")
    assert unknown.exit_code == 1 and "no inversion types in family" in unknown.output


def test_inversions_reports_a_broken_catalogue(tmp_path: Path) -> None:
    bad = tmp_path / "catalogue" / "deps"
    bad.mkdir(parents=True)
    (bad / "oops.yaml").write_text("id: deps/oops\nfamily: [unclosed\n")
    result = run("inversions", "--catalogue-dir", str(tmp_path / "catalogue"))
    assert result.exit_code == 1
    assert "oops.yaml" in result.output


# -- output in a pipe and on a terminal ---------------------------------------------------------


def test_tables_in_a_pipe_are_tab_separated_and_never_wrap(store_root: Path) -> None:
    narrow = {"COLUMNS": "40"}  # what a pipe used to get: rich folded every cell to fit
    lines = run("--store", str(store_root), "tasks", "list", env=narrow).output.splitlines()
    assert lines[0] == "# 3 task(s)"
    assert lines[1].split("\t") == ["id", "type", "repo", "target", "difficulty", "repaired by", "evidence", "f2p",
                                     "p2p"]
    rows = [line.split("\t") for line in lines[2:]]
    assert len(rows) == 3 and all(len(row) == 9 for row in rows)
    assert {row[0] for row in rows} == {t["id"] for t in json.loads(run("--store", str(store_root), "tasks", "list",
                                                                        "--json").output)}
    assert {row[2] for row in rows} == {GREETER, TABULATE}
    shown = run("--store", str(store_root), "tasks", "show", rows[0][0], env=narrow).output
    assert "==> break.sh <==\n#!/bin/bash\n" in shown and f"id\t{rows[0][0]}\n" in shown


def test_inversions_in_a_pipe_print_whole_descriptions() -> None:
    from miner.catalogue import load_catalogue

    catalogue = load_catalogue()
    lines = run("inversions", env={"COLUMNS": "40"}).output.splitlines()
    assert lines[1].split("\t") == ["id", "category", "target", "backends", "whole suite", "evidence", "description"]
    rows = {cells[0]: cells for cells in (line.split("\t") for line in lines[2:])}
    assert set(rows) == set(catalogue)
    for type_id, cells in rows.items():
        assert cells[1] == catalogue[type_id].category, type_id
        assert cells[6] == " ".join(catalogue[type_id].description.split()), type_id
    assert (rows["deps/uninstall"][5], rows["config/missing-key"][5]) == ("package-index", "(per target)")


def test_a_terminal_gets_rich_tables(store_root: Path) -> None:
    shown = run("--store", str(store_root), "tasks", "list", env={"FORCE_COLOR": "1", "COLUMNS": "200"}).output
    assert "┃" in shown and "\t" not in shown


def test_categories_filter_the_catalogue_tasks_and_stats(store_root: Path) -> None:
    rows = json.loads(run("inversions", "--json", "--category", "compatibility").output)
    assert "deps/wrong-version" in {r["id"] for r in rows} and {r["category"] for r in rows} == {"compatibility"}
    assert "compatibility" in run("inversions").output
    tasks = json.loads(run("--store", str(store_root), "tasks", "list", "--json", "--category", "compatibility").output)
    assert {t["type"] for t in tasks} == {"deps/wrong-version"}
    both = run("--store", str(store_root), "tasks", "list", "--json", "--category", "compatibility",
               "--category", "configuration")
    assert {t["type"] for t in json.loads(both.output)} == {"deps/wrong-version", "config/syntax-error"}
    unknown = run("--store", str(store_root), "tasks", "list", "--category", "no-such-category")
    assert unknown.exit_code == 1 and "unknown category 'no-such-category'" in unknown.output
    table = run("--store", str(store_root), "stats").output
    assert "per category" in table and "dependencies" in table


def test_compound_needs_stored_tasks(tmp_path: Path) -> None:
    Store(tmp_path / "empty").close()
    result = run("--store", str(tmp_path / "empty"), "compound", "--k", "2")
    assert result.exit_code == 1 and "no stored task to build compounds from" in result.output
    result = run("--store", str(tmp_path / "empty"), "compound", "--k", "1")
    assert result.exit_code == 2 and "--k" in result.output
