"""Every command answers bad input with one line naming the problem and a non-zero exit.

Each case runs the installed `miner` command in a real process (so a traceback would show) with
a bad argument, an unknown type or family, an unknown task id, a folder holding no task, or no
Docker engine, and checks exactly that: exit code != 0, no "Traceback" anywhere, nothing on
standard output, and one line on standard error that names the problem.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FIXTURES, miner_command, miner_env, write_repos

from miner.store import Store

NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing listens there: no Docker engine answers

# (name, argv after `miner --store STORE`, what the line must contain, extra environment)
CASES: list[tuple[str, list[str], str, dict[str, str]]] = [
    ("unknown-command", ["nope"], "No such command 'nope'", {}),
    ("crawl-unknown-type", ["crawl", "--repos", "{repos}", "--types", "nope"],
     "unknown inversion type or family 'nope'", {}),
    ("crawl-missing-repos", ["crawl", "--repos", "{tmp}/missing.txt"], "does not exist", {}),
    ("crawl-no-source", ["crawl", "--repos", "{empty}"], "no source to crawl", {}),
    ("crawl-bad-budget", ["crawl", "--repos", "{repos}", "--budget", "0"], "--budget", {}),
    ("crawl-bad-backend", ["crawl", "--repos", "{repos}", "--backend", "nope"], "--backend", {}),
    ("crawl-no-engine", ["crawl", "--repos", "{repos}", "--backend", "docker"], "no Docker engine answers",
     NO_ENGINE),
    ("tasks-list-unknown-type", ["tasks", "list", "--type", "nope"], "unknown inversion type or family 'nope'", {}),
    ("tasks-list-unknown-type-id", ["tasks", "list", "--type", "deps/nope"],
     "unknown inversion type or family 'deps/nope'", {}),
    ("tasks-list-bad-difficulty", ["tasks", "list", "--difficulty", "nope"], "--difficulty", {}),
    ("tasks-list-unknown-repo", ["tasks", "list", "--repo", "nope"], "no project in the store matches", {}),
    ("tasks-list-no-store", ["--store", "{tmp}/no-store", "tasks", "list"], "no store at", {}),
    ("tasks-show-unknown-id", ["tasks", "show", "NO_SUCH_ID"], "no task with id 'NO_SUCH_ID'", {}),
    ("tasks-show-no-id", ["tasks", "show"], "Missing argument", {}),
    ("stats-bad-option", ["stats", "--bogus"], "No such option '--bogus'", {}),
    ("stats-no-store", ["--store", "{tmp}/no-store", "stats"], "no store at", {}),
    ("replay-unknown-id", ["replay", "NO_SUCH_ID"], "no task with id 'NO_SUCH_ID'", {}),
    ("ladder-unknown-id", ["ladder", "NO_SUCH_ID"], "no task with id 'NO_SUCH_ID'", {}),
    ("ladder-no-store", ["--store", "{tmp}/no-store", "ladder"], "no store at", {}),
    ("tasks-list-unknown-rung", ["tasks", "list", "--min-rung", "nope"], "'nope' is no rung of the ladder", {}),
    ("crawl-unknown-rung", ["crawl", "--repos", "{repos}", "--refuse-trivial", "nope"],
     "'nope' is no rung of the ladder", {}),
    ("replay-bad-backend", ["replay", "NO_SUCH_ID", "--backend", "nope"], "--backend", {}),
    ("inversions-unknown-family", ["inversions", "--family", "nope"], "no inversion types in family 'nope'", {}),
    ("inversions-missing-dir", ["inversions", "--catalogue-dir", "{tmp}/missing"], "does not exist", {}),
    ("inversions-broken-catalogue", ["inversions", "--catalogue-dir", "{broken}"], "bad.yaml", {}),
    ("graph-unknown-source", ["graph", "{tmp}/no-such-project"], "no-such-project", {}),
    ("graph-bad-format", ["graph", "x", "--format", "nope"], "--format", {}),
    ("images-list-no-engine", ["images", "list"], "no Docker engine answers", NO_ENGINE),
    ("images-prune-no-engine", ["images", "prune"], "no Docker engine answers", NO_ENGINE),
    ("images-bootstrap-no-engine", ["images", "bootstrap"], "no Docker engine answers", NO_ENGINE),
    ("images-unknown-verb", ["images", "nope"], "No such command 'nope'", {}),
    ("export-bad-format", ["export", "--format", "nope", "--out", "{tmp}/out"], "--format", {}),
    ("export-bad-dataset", ["export", "--format", "harbor", "--out", "{tmp}/out", "--dataset", "nope"],
     "--dataset must be ORG/NAME", {}),
    ("export-registry-without-images", ["export", "--format", "harbor", "--out", "{tmp}/out", "--registry", "r:5000/x"],
     "give --images too", {}),
    ("revalidate-not-a-dataset", ["revalidate", "{tmp}"], "holds no dataset.toml", {}),
    ("revalidate-missing-folder", ["revalidate", "{tmp}/missing"], "does not exist", {}),
    ("import-not-a-dataset", ["import", "{tmp}", "-o", "{tmp}/back"], "not a dataset exported with --format hf", {}),
    ("import-missing-folder", ["import", "{tmp}/missing", "-o", "{tmp}/back"], "does not exist", {}),
    ("export-no-out", ["export", "--format", "jsonl"], "--out", {}),
    ("export-stdout-not-jsonl", ["export", "--format", "harbor", "-o", "-"], "standard output", {}),
    ("export-unknown-type", ["export", "--format", "jsonl", "-o", "-", "--type", "nope"],
     "unknown inversion type or family 'nope'", {}),
    ("export-unknown-repo", ["export", "--format", "jsonl", "-o", "-", "--repo", "nope"],
     "no project in the store matches", {}),
    ("export-nothing-stored", ["export", "--format", "jsonl", "-o", "{tmp}/out"], "no stored task matches", {}),
    ("check-empty-folder", ["check", "{emptydir}"], "no exported task in", {}),
    ("check-missing-folder", ["check", "{tmp}/missing"], "does not exist", {}),
    ("discover-no-input", ["discover"], "give exactly one of --pypi NAMES_FILE, --npm NAMES_FILE or --github QUERY", {}),
    ("discover-missing-npm-names", ["discover", "--npm", "{tmp}/missing.txt"], "cannot read the names file", {}),
    ("discover-missing-names", ["discover", "--pypi", "{tmp}/missing.txt"], "cannot read the names file", {}),
    ("compound-bad-k", ["compound", "--k", "1"], "--k", {}),
    ("compound-no-store", ["--store", "{tmp}/no-store", "compound"], "no store at", {}),
    ("gc-bad-limit", ["gc", "--cache-limit-gb", "-1"], "--cache-limit-gb", {}),
    ("gc-no-store", ["--store", "{tmp}/no-store", "gc"], "no store at", {}),
    ("inversions-learn-unknown-id", ["inversions", "learn", "NO_SUCH_ID", "--model", "m"],
     "no task with id 'NO_SUCH_ID'", {}),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The paths the cases name: an empty store, repos files, an empty folder, a broken catalogue."""
    tmp = tmp_path_factory.mktemp("errors")
    Store(tmp / "store").close()
    (tmp / "emptydir").mkdir()
    (tmp / "broken" / "data").mkdir(parents=True)
    (tmp / "broken" / "data" / "bad.yaml").write_text("description: [unclosed\n")
    return {"tmp": str(tmp), "store": str(tmp / "store"), "emptydir": str(tmp / "emptydir"),
            "broken": str(tmp / "broken"),
            "repos": str(write_repos(tmp / "repos.txt", [FIXTURES / "textkit"])),
            "empty": str(write_repos(tmp / "empty.txt", ["# no source here"]))}


def run_case(places: dict[str, str], args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [*miner_command(), "--store", places["store"], *(arg.format(**places) for arg in args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**miner_env(), **env},
                          cwd=places["tmp"])


@pytest.fixture(scope="module")
def answers(places: dict[str, str]) -> dict[str, subprocess.CompletedProcess[str]]:
    """What each case printed, run side by side (each is a short process that mostly starts up)."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        done = pool.map(lambda case: run_case(places, case[1], case[3]), CASES)
        return {case[0]: answer for case, answer in zip(CASES, done)}


@pytest.mark.parametrize("name, names", [(case[0], case[2]) for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(answers: dict[str, subprocess.CompletedProcess[str]], name: str, names: str) -> None:
    done = answers[name]
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.stdout == "", done.stdout
    assert len(lines) == 1 and names in lines[0], done.stderr


def test_every_command_has_a_case() -> None:
    """A new command needs its bad-input case here."""
    from click import Group

    from miner.cli import main

    def leaves(group: Group, prefix: str = "") -> set[str]:
        found = set()
        for name, command in group.commands.items():
            found |= leaves(command, f"{prefix}{name}-") if isinstance(command, Group) else {f"{prefix}{name}"}
        return found

    covered = {case[0] for case in CASES}
    assert all(any(name.startswith(f"{leaf}-") for name in covered) for leaf in leaves(main)), sorted(leaves(main))


def test_no_store_is_left_behind_by_a_bad_crawl(places: dict[str, str], tmp_path: Path) -> None:
    """A crawl refused for bad input creates nothing."""
    done = subprocess.run([*miner_command(), "--store", str(tmp_path / "new"), "crawl", "--repos", places["repos"],
                           "--types", "nope"], capture_output=True, text=True, timeout=120, env=miner_env())
    assert done.returncode != 0 and not (tmp_path / "new").exists()
