"""End-to-end crawls through the installed `miner` command, checked against the design's rules.

Every task the session crawl of the good fixtures stored is verified again, on its own terms,
in a fresh sandbox of the local backend: its break.sh fails the stored F2P tests and leaves the
P2P ones passing, leaves the protected files byte-identical, and its fix.sh brings them all
back. Test outcomes come from a small pytest plugin written here (pytest's own node ids and
reports), not from miner's junit parser, so the check does not lean on what it checks.
Also: the stats add up, `tasks list` filters, ids are content hashes, and bad input (malformed
repos lines, projects that cannot be mined) is reported without stopping the crawl.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import (
    FIXTURES,
    GOOD_FIXTURES,
    LOCAL_FAMILIES,
    MINED_OPTIONS,
    Crawl,
    run_miner,
    summary_rows,
    write_repos,
)

from miner.catalogue import load_catalogue, select_types
from miner.healthy import run_checks
from miner.ecosystems import build_spec
from miner.models import PROJECT_DIR, Task, content_id
from miner.pipeline import CrawlOptions, choose_candidates
from miner.sandbox.base import Healthy, Sandbox
from miner.sandbox.local import LocalBackend
from miner.sources import fetch, parse_source
from miner.store import Store

VERIFY_DIR = "/sandbox/.verify"
PLUGIN_NAME = "miner_verify_outcomes"
# Records pytest's own verdict for every test: any failed phase is a failure, a skipped
# setup or call is a skip, and only a test whose every phase passed counts as passed.
PLUGIN = '''
import json, os

_seen = {}

def pytest_runtest_logreport(report):
    state = _seen.setdefault(report.nodeid, "passed")
    if report.failed:
        _seen[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and state == "passed":
        _seen[report.nodeid] = "skipped"

def pytest_sessionfinish(session):
    with open(os.environ["MINER_VERIFY_OUT"], "w") as handle:
        json.dump(_seen, handle)
'''
TASK_FILES = {"task.json", "break.sh", "fix.sh", "instruction.md", "healthy.json", "broken.json",
              "fixed.json", "miner-version", "logs/break.log", "logs/fix.log", "logs/break-replay.log"}
TASK_ROW_KEYS = {"id", "type", "family", "repo", "commit", "target", "category", "parts", "difficulty", "blind_repair",
                 "f2p_count", "p2p_count", "summary", "model", "evidence", "created"}


# -- independent checks of one task -------------------------------------------------------------


def pytest_outcomes(box: Sandbox, task: Task) -> dict[str, str]:
    """Outcome of every test the task's command runs, as pytest itself reports it (node ids)."""
    out = f"{VERIFY_DIR}/outcomes.json"
    # Appended to PYTHONPATH so a PYTHONPATH the break set keeps its precedence.
    command = (f'rm -f {out}; export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{VERIFY_DIR}" MINER_VERIFY_OUT={out}; '
               f"{task.test_command} -p {PLUGIN_NAME} -p no:cacheprovider -q --continue-on-collection-errors")
    result = box.run(command, timeout=600)
    data = box.read(out)
    assert data is not None, f"the verifying pytest run wrote no outcomes:\n{result.output[-2000:]}"
    return json.loads(data)


def outcomes(box: Sandbox, task: Task) -> dict[str, str]:
    """Outcomes of the task's checks: pytest's verdicts, plus the derived probes (judged by
    miner's probe runner against the digests recorded healthy)."""
    found = pytest_outcomes(box, task)
    probe_ids = [t for t in task.f2p + task.p2p if t.startswith("probe::")]
    if probe_ids:
        found |= run_checks(box, task.test_command, task.probes, tests=probe_ids).outcomes()
    return found


def protected_hashes(box: Sandbox, paths: list[str]) -> dict[str, str]:
    """sha256 of project files inside the sandbox, by project-relative path."""
    listing = " ".join(shlex.quote(p) for p in paths)
    result = box.run(f"cd {PROJECT_DIR} && sha256sum -- {listing} 2>/dev/null; true", timeout=120)
    found = {}
    for line in result.output.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) == 64:
            found[name] = digest
    return found


def leaked_lines(task: Task, text: str) -> list[str]:
    """What in an instruction would hand out the answer: the type, the summary, a line of the fix."""
    name = task.type_id.split("/", 1)[1]
    markers = [task.type_id, task.summary] + ([name] if "-" in name else [])
    markers += [line.strip() for line in task.fix_script.splitlines()
                if len(line.strip()) >= 20 and not line.strip().startswith("set -")]
    return [m for m in markers if m in text]


def check_folder(store: Store, task: Task) -> list[str]:
    folder = store.task_dir(task.id)
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    problems = [f"missing files {sorted(TASK_FILES - files)}"] if TASK_FILES - files else []
    if Task.model_validate_json((folder / "task.json").read_text()) != task:
        problems.append("task.json differs from the indexed task")
    for name, script in (("break.sh", task.break_script), ("fix.sh", task.fix_script)):
        if (folder / name).read_text() != script or not (folder / name).stat().st_mode & 0o100:
            problems.append(f"{name} is not the task's script, or not executable")
    healthy = json.loads((folder / "healthy.json").read_text())["outcomes"]
    broken = json.loads((folder / "broken.json").read_text())["outcomes"]
    fixed = json.loads((folder / "fixed.json").read_text())["outcomes"]
    checks = task.f2p + task.p2p
    if any(healthy.get(t) != "passed" for t in checks):
        problems.append("healthy.json: some F2P/P2P check did not pass healthy")
    if any(broken.get(t) == "passed" for t in task.f2p) or any(broken.get(t) != "passed" for t in task.p2p):
        problems.append("broken.json disagrees with F2P/P2P")
    if any(fixed.get(t) != "passed" for t in checks):
        problems.append("fixed.json: some check still fails")
    instruction = (folder / "instruction.md").read_text()
    if instruction != task.instruction or not instruction.strip():
        problems.append("instruction.md is empty or not the task's instruction")
    if leaked_lines(task, instruction):
        problems.append(f"instruction.md gives the answer away: {leaked_lines(task, instruction)[:3]}")
    return problems


def check_in_sandbox(backend: LocalBackend, env: Healthy, store: Store, task: Task) -> list[str]:
    """Apply the folder's break.sh and fix.sh to a fresh copy and check the acceptance rules."""
    folder, problems = store.task_dir(task.id), []
    network = load_catalogue()[task.type_id].network
    with backend.fork(env) as box:
        box.put(f"{VERIFY_DIR}/{PLUGIN_NAME}.py", PLUGIN.encode())
        box.put(f"{VERIFY_DIR}/break.sh", (folder / "break.sh").read_bytes(), mode=0o755)
        box.put(f"{VERIFY_DIR}/fix.sh", (folder / "fix.sh").read_bytes(), mode=0o755)
        applied = box.run(f"bash {VERIFY_DIR}/break.sh", network=bool(network.get("break")), timeout=300)
        if applied.exit_code != 0:
            return [f"break.sh exited {applied.exit_code}: {applied.output[-500:]}"]
        broken = outcomes(box, task)
        still_passing = [t for t in task.f2p if broken.get(t, "missing") == "passed"]
        failing_p2p = [t for t in task.p2p if broken.get(t, "missing") != "passed"]
        if not task.f2p or still_passing:
            problems.append(f"F2P tests passing after the break: {still_passing or 'F2P is empty'}")
        if failing_p2p:
            problems.append(f"P2P tests failing after the break: {failing_p2p[:5]}")
        if not task.p2p and not task.whole_suite:
            problems.append("P2P is empty but the task is not labelled whole-suite")
        hashes = protected_hashes(box, sorted(task.protected))
        changed = [p for p, digest in task.protected.items() if hashes.get(p) != digest]
        if not task.protected or changed:
            problems.append(f"protected files changed by the break: {changed[:5] or 'none recorded'}")
        fixed = box.run(f"bash {VERIFY_DIR}/fix.sh", network=bool(network.get("fix")), timeout=300)
        if fixed.exit_code != 0:
            return problems + [f"fix.sh exited {fixed.exit_code}: {fixed.output[-500:]}"]
        after = outcomes(box, task)
        not_back = [t for t in task.f2p + task.p2p if after.get(t, "missing") != "passed"]
        if not_back:
            problems.append(f"tests still failing after the fix: {not_back[:5]}")
    return problems


# -- the session crawl of the good fixtures -----------------------------------------------------


def local_project(name: str, store: Store):
    """The fixture as the crawl fetched it (same source line, so the same key and commit)."""
    return fetch(parse_source(str(FIXTURES / name), FIXTURES), store.root / "cache" / "sources")


def test_crawl_mines_every_good_fixture(mined_crawl: Crawl) -> None:
    store = Store(mined_crawl.store, create=False)
    projects = {p["repo"]: p for p in store.projects()}
    rows = summary_rows(mined_crawl.output)
    tasks = store.list_tasks()
    for name in GOOD_FIXTURES:
        repo = str(FIXTURES / name)
        assert projects[repo]["status"] == "mined" and projects[repo]["has_healthy"], projects[repo]
        assert rows[repo]["status"] == "mined"
        assert any(t.repo == repo for t in tasks), f"no task from {name}"
    assert {t.family for t in tasks} >= set(LOCAL_FAMILIES), "some local family has no validated task"
    assert all(t.backend == "local" for t in tasks)


STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"  # the local time that starts each progress line in a pipe


def test_a_piped_crawl_prints_a_timestamped_line_per_phase_and_per_result(mined_crawl: Crawl) -> None:
    """The session crawl's output went to a pipe: plain lines, no live display, no box drawing."""
    budget = int(MINED_OPTIONS[MINED_OPTIONS.index("--budget") + 1])
    lines = mined_crawl.output.splitlines()
    stamped = [line for line in lines if re.match(rf"{STAMP} ", line)]
    assert [line[:19] for line in stamped] == sorted(line[:19] for line in stamped)  # printed as it happened
    assert not any(line.startswith(("┃", "│", "┏")) for line in lines)
    for name in GOOD_FIXTURES:
        phases = [line.split(" ", 2)[2] for line in stamped if line.split(" ", 2)[1] == name]
        heads = ("fetching ", "building (", "recording the healthy state", "choosing inversion points")
        assert len(phases) > 4 and all(p.startswith(h) for p, h in zip(phases, heads)), phases
        results = [p for p in phases if re.fullmatch(r"candidate \d+/\d+ \S+ on .+: (validated|rejected \(\S+\))", p)]
        assert len(results) == budget, phases
        assert phases[-1].startswith("mined: "), phases


def test_every_stored_task_meets_the_acceptance_rules(mined_store: Path) -> None:
    store = Store(mined_store, create=False)
    tasks = store.list_tasks()
    assert tasks
    backend, envs = LocalBackend(), {}
    for name in GOOD_FIXTURES:
        project = local_project(name, store)
        envs[project.repo] = backend.build(project, build_spec(project), store.work_root / project.key)  # reused
        assert all(t.commit == project.commit for t in tasks if t.repo == project.repo)

    def check(task: Task) -> list[str]:
        return check_folder(store, task) + check_in_sandbox(backend, envs[task.repo], store, task)

    with ThreadPoolExecutor(max_workers=2) as pool:  # each check mostly waits for its sandbox
        found = list(zip(tasks, pool.map(check, tasks)))
    problems = {f"{t.id} {t.type_id} on {t.target.key}": p for t, p in found if p}
    assert not problems, json.dumps(problems, indent=1)

    # The same checks catch a task whose record lies: a P2P test moved to F2P, a protected hash changed.
    task = next(t for t in tasks if any(not test.startswith("probe::") for test in t.p2p))
    moved = next(test for test in task.p2p if not test.startswith("probe::"))
    first = sorted(task.protected)[0]
    wrong = task.model_copy(update={"f2p": task.f2p + [moved], "p2p": [t for t in task.p2p if t != moved],
                                    "protected": {**task.protected, first: "0" * 64}})
    caught = "\n".join(check_in_sandbox(backend, envs[task.repo], store, wrong))
    assert "F2P tests passing after the break" in caught and moved in caught
    assert "protected files changed" in caught and first in caught


def test_task_ids_are_content_hashes_and_stable(mined_store: Path) -> None:
    """Same content, same id: recomputed from the task, and again from a fresh candidate choice."""
    store = Store(mined_store, create=False)
    types = MINED_OPTIONS[MINED_OPTIONS.index("--types") + 1]  # the crawl's own choice of types
    local_types = [t for t in select_types(load_catalogue(), types) if "local" in t.backends]
    budget = int(MINED_OPTIONS[MINED_OPTIONS.index("--budget") + 1])
    seed = int(MINED_OPTIONS[MINED_OPTIONS.index("--seed") + 1])
    with sqlite3.connect(store.db_path) as db:
        tried = list(db.execute("SELECT id, repo, status FROM candidates"))
    tasks = store.list_tasks()
    assert {t.id for t in tasks} == {cid for cid, _, status in tried if status == "validated"}
    for task in tasks:
        assert task.id == content_id(task.repo, task.commit, task.type_id, task.target.key, task.break_script)
    for name in GOOD_FIXTURES:
        project = local_project(name, store)
        again = choose_candidates(project, store.healthy(project.key), local_types,
                                  CrawlOptions(budget=budget, seed=seed))
        # the crawl tried `budget` of them: a prefix, except that targets that missed went last
        tried_here = {cid for cid, repo, _ in tried if repo == project.repo}
        assert tried_here <= {inversion.id_for(project) for inversion in again}
        # unrecoverable pairs (rule 8) are judged besides the budget, never run
        unrecoverable = {i.id_for(project) for i in again if i.no_evidence}
        runnable = [i for i in again if not i.no_evidence]
        assert len(tried_here - unrecoverable) == min(budget, len(runnable))


def test_stats_add_up(mined_crawl: Crawl) -> None:
    done = run_miner(mined_crawl.store, "stats", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    with sqlite3.connect(mined_crawl.store / "miner.db") as db:
        per_type = {row[0]: (row[1], row[2]) for row in db.execute(
            "SELECT type_id, COUNT(*), SUM(status = 'validated') FROM candidates GROUP BY type_id")}
    buckets = [stats, *stats["by_type"].values(), *stats["by_project"].values()]
    for bucket in buckets:
        assert bucket["tried"] == bucket["validated"] + bucket["rejected"]
        assert sum(bucket["by_rule"].values()) == bucket["rejected"]
        assert bucket["yield"] == pytest.approx(bucket["validated"] / bucket["tried"] if bucket["tried"] else 0)
    assert {t: (b["tried"], b["validated"]) for t, b in stats["by_type"].items()} == per_type
    assert stats["tasks"] == stats["validated"] > 0 and stats["projects"] == len(GOOD_FIXTURES)
    budget = int(MINED_OPTIONS[MINED_OPTIONS.index("--budget") + 1])
    # the budget is spent on candidates that run; unrecoverable pairs (rule 8) are judged besides it
    assert {repo: b["tried"] - b["by_rule"].get("unrecoverable", 0) for repo, b in stats["by_project"].items()} == {
        str(FIXTURES / name): budget for name in GOOD_FIXTURES}
    summary = re.search(r"(\d+) projects, (\d+) candidates tried, (\d+) tasks validated", mined_crawl.output)
    assert summary and tuple(map(int, summary.groups())) == (3, stats["tried"], stats["validated"])
    table = run_miner(mined_crawl.store, "stats").stdout
    for type_id, bucket in stats["by_type"].items():  # the table shows each type's yield
        assert re.search(rf"{re.escape(type_id)}\s.*{100 * bucket['yield']:.1f}%", table), type_id


def list_json(store: Path, *args: str) -> list[dict]:
    done = run_miner(store, "tasks", "list", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tasks_list_filters_and_json_shape(mined_store: Path) -> None:
    rows = list_json(mined_store)
    assert rows and all(set(row) == TASK_ROW_KEYS for row in rows)
    for row in rows:
        assert row["type"].startswith(row["family"] + "/") and len(row["id"]) == 16
        assert isinstance(row["f2p_count"], int) and row["f2p_count"] > 0 and isinstance(row["p2p_count"], int)
    deps = list_json(mined_store, "--type", "deps")
    assert deps and {r["id"] for r in deps} == {r["id"] for r in rows if r["family"] == "deps"}
    for type_id in sorted({r["type"] for r in rows if r["family"] == "deps"} | {"deps/uninstall"}):
        exact = list_json(mined_store, "--type", type_id)
        assert {r["id"] for r in exact} == {r["id"] for r in rows if r["type"] == type_id}
    unknown = run_miner(mined_store, "tasks", "list", "--json", "--type", "deps/no-such-type")
    assert unknown.returncode != 0 and "unknown inversion type or family 'deps/no-such-type'" in unknown.stderr
    textkit = list_json(mined_store, "--repo", "textkit")
    assert textkit and {r["id"] for r in textkit} == {r["id"] for r in rows if r["repo"].endswith("/textkit")}


def test_graph_of_a_task_to_standard_output(mined_store: Path, tmp_path: Path) -> None:
    """`miner graph ID -o -`: the graph alone on standard output, the report on stderr."""
    task = Store(mined_store, create=False).list_tasks()[0]
    done = run_miner(mined_store, "graph", task.id, "--format", "json", "-o", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    graph = json.loads(done.stdout)
    assert graph and "wrote standard output" in done.stderr and list(tmp_path.iterdir()) == []


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.slow  # a crawl of its own
def test_bad_input_is_reported_and_the_rest_is_mined(tmp_path: Path) -> None:
    good = FIXTURES / "textkit"
    repos = write_repos(tmp_path / "repos.txt", [
        "# malformed lines first, then a good project, then projects that cannot be mined",
        "pypi:requests>=2.0",
        f"{good}  colour=blue",
        f"{FIXTURES / 'no-such-project'}",
        good,
        FIXTURES / "bad" / "broken-build",
        FIXTURES / "bad" / "no-tests",
        FIXTURES / "bad" / "hanging-tests",
        FIXTURES / "bad" / "all-fail",
    ])
    store_root = tmp_path / "store"
    done = run_miner(store_root, "crawl", "--repos", repos, "--budget", "1", "--timeout", "20", "--jobs", "2")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    errors = dict(re.findall(rf"^{re.escape(str(repos))}:(\d+): (.+)$", output, re.MULTILINE))
    assert set(errors) == {"2", "3", "4"}, output[-3000:]
    assert "NAME==VERSION" in errors["2"]
    assert "unknown override 'colour'" in errors["3"]
    assert "folder not found" in errors["4"]

    projects = {Path(p["repo"]).name: p for p in Store(store_root, create=False).projects()}
    assert set(projects) == {"textkit", "broken-build", "no-tests", "hanging-tests", "all-fail"}
    assert projects["textkit"]["status"] == "mined"
    reasons = {name: p["reason"] for name, p in projects.items() if p["status"] == "skipped"}
    assert set(reasons) == {"broken-build", "no-tests", "hanging-tests", "all-fail"}
    assert reasons["broken-build"].startswith("build failed: ")
    assert "no tests" in reasons["no-tests"]
    assert "exceeded its time limit of 20s" in reasons["hanging-tests"]
    assert reasons["all-fail"].startswith("no passing tests")

    rows = summary_rows(output)
    assert rows[str(good)]["status"] == "mined" and rows[str(good)]["tried"] == "1"
    squeeze = lambda text: "".join(text.split())  # noqa: E731 - folded cells break lines anywhere
    for name, reason in reasons.items():
        row = rows[str(FIXTURES / "bad" / name)]
        assert row["status"] == "skipped"
        assert squeeze(row["reason / by type"]).startswith(squeeze(reason)[:80]), (name, row)


def test_graph_selection_moves_a_target_that_missed_to_the_end() -> None:
    from types import SimpleNamespace

    from miner.mine import _adaptive

    def cand(name: str, target: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, target=SimpleNamespace(key=target))

    order = [cand("a1", "A"), cand("b1", "B"), cand("a2", "A"), cand("c1", "C"), cand("a3", "A")]
    rules = {"a1": "no-f2p", "b1": "", "c1": "no-p2p"}
    seen = [c.name for c in _adaptive(order, CrawlOptions(select="graph"), lambda c: rules.get(c.name))]
    assert seen == ["a1", "b1", "c1", "a2", "a3"]
    blind = [c.name for c in _adaptive(order, CrawlOptions(select="random"), lambda c: rules.get(c.name))]
    assert blind == ["a1", "b1", "a2", "c1", "a3"]
