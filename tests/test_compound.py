"""Compound tasks (miner.compound): validated inversions of one project stacked into one task.

Fast: how parts are composed (breaks in order, fixes in reverse, each in a subshell), which
parts stand apart, the order of combinations, the difficulty. Slow (real crawls of
fixtures/stocksync through the `miner` command): `crawl --compound 2` and `miner compound --k 3`
store compounds validated as a whole, each part necessary; a compound whose parts overlap (one
part's fix repairs the other's symptom) is refused by the leave-one-out check; and (docker) its
Harbor export passes `miner check` (oracle 1, nop 0).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import networkx as nx
import pytest
from conftest import FIXTURES, run_miner, write_repos

from miner.catalogue import load_catalogue
from miner.compound import combinations, compound_inversion, eligible, part_of, stand_apart
from miner.models import Evidence, Part, Source, Target, Task
from miner.tasks import compound_difficulty, difficulty

CATALOGUE = load_catalogue()


def task(tid: str, type_id: str, target: Target, f2p: list[str], score: float = 0.4, depth: int | None = 2,
         **kw) -> Task:
    itype = CATALOGUE[type_id]
    return Task(id=tid, repo="r", commit="c", source=Source(raw="x", kind="local", location="/x"), type_id=type_id,
                family=itype.family, category=itype.category, target=target, summary=f"summary of {tid}",
                break_script=f"set -euo pipefail\necho break {tid}\n",
                fix_script=f"set -euo pipefail\necho fix {tid}\n",
                f2p=f2p, p2p=["t::ok"], difficulty_score=score, graph_depth=depth,
                evidence=[Evidence(kind="reversible", detail=f"evidence of {tid}")], **kw)


LOCK = Target(kind="state", name="lock:var/a.lock", path="var/a.lock", attrs={"role": "lock"})
TZ = Target(kind="setting", name="timezone", attrs={"aspect": "timezone"})
SIX = Target(kind="distribution", name="six", attrs={"version": "1.17.0"})
SIX_MODULE = Target(kind="module", name="six", path="six.py", attrs={"dist": "six"})


def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node("distribution:six", kind="distribution")
    g.add_node("module:six", kind="module")
    g.add_edge("module:six", "distribution:six")
    g.graph["providers"] = {"six": ["six"]}
    return g


def test_parts_break_in_order_and_fix_in_reverse_each_in_a_subshell(tmp_path: Path) -> None:
    a = task("a", "state/stale-lock", LOCK, ["t::a"])
    b = task("b", "deps/uninstall", SIX, ["t::b"])
    inversion = compound_inversion([a, b], CATALOGUE)
    assert (inversion.type_id, inversion.family, inversion.target.kind) == ("compound/2", "compound", "compound")
    assert inversion.target.name == "state:lock:var/a.lock+distribution:six"
    assert inversion.network_fix and not inversion.network_break  # deps/uninstall's fix needs the index
    assert [e.detail for e in inversion.evidence] == ["evidence of a", "evidence of b"]
    for name, script, order in (("break", inversion.break_script, ["a", "b"]),
                                ("fix", inversion.fix_script, ["b", "a"])):
        path = tmp_path / f"{name}.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
        done = subprocess.run(["bash", str(path)], capture_output=True, text=True)
        assert done.stdout.split() == [w for part in order for w in (name, part)]
        assert script.count("\n(\n") == 2


def test_a_failing_part_stops_the_compound(tmp_path: Path) -> None:
    a = task("a", "state/stale-lock", LOCK, ["t::a"]).model_copy(update={"break_script": "exit 3\n"})
    b = task("b", "env/tz-elsewhere", TZ, ["t::b"])
    path = tmp_path / "break.sh"
    path.write_text(compound_inversion([a, b], CATALOGUE).break_script)
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True)
    assert done.returncode == 3 and "break b" not in done.stdout


def test_parts_must_stand_apart() -> None:
    g = graph()
    lock, tz = task("a", "state/stale-lock", LOCK, ["t::a"]), task("b", "env/tz-elsewhere", TZ, ["t::b"])
    assert stand_apart(lock, tz, g)
    assert not stand_apart(lock, task("c", "state/stale-lock", LOCK, ["t::c"]), g)  # same target
    assert not stand_apart(lock, task("d", "env/tz-elsewhere", TZ, ["t::a"]), g)  # same F2P set
    six = task("e", "deps/uninstall", SIX, ["t::e"])
    assert not stand_apart(six, task("f", "deps/bad-pth", SIX_MODULE, ["t::f"]), g)  # one branch of the graph
    assert stand_apart(six, lock, g)


def test_combinations_are_pairwise_apart_and_seeded() -> None:
    g = graph()
    tasks = [task("a", "state/stale-lock", LOCK, ["t::a"]), task("b", "env/tz-elsewhere", TZ, ["t::b"]),
             task("c", "deps/uninstall", SIX, ["t::c"]), task("d", "deps/bad-pth", SIX_MODULE, ["t::d"])]
    pairs = combinations(tasks, 2, g, seed=0)
    ids = [{t.id for t in c} for c in pairs]
    assert {"c", "d"} not in ids and len(ids) == 5
    assert combinations(tasks, 2, g, seed=0) == pairs
    assert [{t.id for t in c} for c in combinations(tasks, 3, g, seed=1)] in (
        [{"a", "b", "c"}, {"a", "b", "d"}], [{"a", "b", "d"}, {"a", "b", "c"}])
    assert all(len({t.family for t in c}) == 2 for c in pairs[:4])  # other families first


def test_combinations_spread_their_parts() -> None:
    """A setting stands apart from three state tasks of one family: ranked by families alone, the
    first three compounds would all be the setting plus one of them."""
    pid = Target(kind="state", name="pidfile:var/a.pid", path="var/a.pid", attrs={"role": "pidfile"})
    cache = Target(kind="state", name="cache:var/cache", path="var/cache", attrs={"role": "cache"})
    lock2 = Target(kind="state", name="lock:var/b.lock", path="var/b.lock", attrs={"role": "lock"})
    tasks = [task("w", "env/tz-elsewhere", TZ, ["t::w"]), task("l", "state/stale-lock", LOCK, ["t::l"]),
             task("p", "state/stale-pidfile", pid, ["t::p"]), task("c", "state/cache-unwritable", cache, ["t::c"]),
             task("m", "state/stale-lock", lock2, ["t::m"])]
    for seed in range(5):
        order = [{t.id for t in c} for c in combinations(tasks, 2, None, seed)]
        assert len(order) == 10 and "w" in order[0]  # the most families first
        assert not order[0] & order[1]  # then parts not used yet
        assert max(sum(t in c for c in order[:5]) for t in "wlpcm") == 2


def test_only_single_procedural_partial_tasks_are_parts() -> None:
    ok = task("a", "state/stale-lock", LOCK, ["t::a"])
    whole = task("b", "env/pythonhome", TZ, ["t::a", "t::ok"], whole_suite=True)
    agent = task("c", "env/tz-elsewhere", TZ, ["t::c"], model="some-model")
    other = task("d", "env/tz-elsewhere", TZ, ["t::d"], backend="docker")
    assert [t.id for t in eligible([ok, whole, agent, other], CATALOGUE, "local")] == ["a"]


def test_difficulty_rises_with_parts_and_depth() -> None:
    parts = [part_of(task(f"p{i}", "state/stale-lock", LOCK, [f"t::{i}"], score=0.4, depth=2), CATALOGUE)
             for i in range(3)]
    two, three = compound_difficulty(parts[:2]), compound_difficulty(parts)
    assert two[1] > 0.4 and three[1] > two[1]
    deep = [p.model_copy(update={"graph_depth": 4}) for p in parts[:2]]
    assert compound_difficulty(deep)[1] > two[1]
    assert compound_difficulty([]) == difficulty(None, 1, "compound")
    assert all(isinstance(p, Part) and p.category == "concurrency-state" for p in parts)


# -- real crawls ------------------------------------------------------------------------------------

CA_OVERRIDE = "env.SSL_CERT_FILE=/sandbox/project/certs/dev-ca.pem"
PART_TYPES = "state/stale-lock,env/tz-elsewhere,net/http-proxy-dead,deps/submodule-deleted"


@pytest.fixture(scope="module")
def compound_store(tmp_path_factory) -> Path:
    """A store with stocksync's single tasks of four types and the compounds `crawl --compound 2` made."""
    base = tmp_path_factory.mktemp("compound")
    repos = write_repos(base / "repos.txt", [f"{FIXTURES / 'stocksync'} {CA_OVERRIDE}"])
    store = base / "store"
    done = run_miner(store, "crawl", "--repos", repos, "--types", PART_TYPES, "--budget", "6",
                     "--compound", "2", "--compound-budget", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return store


def stored(store: Path, *args: str) -> list[dict]:
    done = run_miner(store, "tasks", "list", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def full_task(store: Path, task_id: str) -> dict:
    done = run_miner(store, "tasks", "show", task_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_crawl_stacks_validated_inversions_into_compounds(compound_store: Path) -> None:
    compounds = stored(compound_store, "--type", "compound")
    assert compounds, "crawl --compound 2 built no compound task"
    singles = {t["id"]: full_task(compound_store, t["id"]) for t in stored(compound_store)
               if not t["type"].startswith("compound/")}
    for row in compounds:
        record = full_task(compound_store, row["id"])
        assert record["type_id"] == "compound/2" and record["category"] == "compound"
        parts = record["parts"]
        assert len(parts) == 2 and len({p["target"]["name"] for p in parts}) == 2
        union = set().union(*(set(p["f2p"]) for p in parts))
        assert union <= set(record["f2p"])
        assert {(e["kind"], e["detail"]) for e in record["evidence"]} == {
            (e["kind"], e["detail"]) for p in parts for e in p["evidence"]}
        assert record["difficulty_score"] > max(singles[p["task_id"]]["difficulty_score"] for p in parts)
        assert set(record["instructions"]) == {"symptom", "hard", "hinted"}
        assert "separate things are broken" in record["instructions"]["hinted"]
        # the category filter finds a compound through its parts
        assert row["id"] in {t["id"] for t in stored(compound_store, "--category", parts[0]["category"])}


@pytest.mark.slow
def test_compound_command_builds_from_stored_tasks(compound_store: Path) -> None:
    done = run_miner(compound_store, "compound", "--k", "3", "--budget", "1", "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads(done.stdout)
    assert len(rows) == 1 and rows[0]["tried"] == 1
    made = stored(compound_store, "--type", "compound/3")
    assert len(made) == rows[0]["validated"]
    refused = sum(rows[0]["refused"].values())
    assert rows[0]["validated"] + refused == 1


@pytest.mark.slow
def test_compound_command_reports_a_project_it_cannot_prepare_again(tmp_path: Path) -> None:
    """The project's folder and its built copy are gone: `miner compound` names it and why, and exits 1."""
    project = shutil.copytree(FIXTURES / "textkit", tmp_path / "textkit")
    store = tmp_path / "store"
    done = run_miner(store, "crawl", "--repos", write_repos(tmp_path / "repos.txt", [project]), "--budget", "3")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert stored(store), "the crawl stored no task to build compounds from"
    shutil.rmtree(project)
    for built in ("work", "cache"):  # the snapshot of the folder and the workspace built from it
        shutil.rmtree(store / built)
    done = run_miner(store, "compound", "--k", "2", "--json")
    assert done.returncode == 1
    [row] = json.loads(done.stdout)
    assert row["skipped"] and row["tried"] == 0
    assert "skipped" in done.stderr and str(project) in done.stderr


@pytest.mark.slow
def test_a_rerun_crawl_adds_no_compound_and_a_larger_budget_stacks_more(compound_store: Path) -> None:
    """The compounds are one more unit of the project, run after its candidates are recorded, also
    when they were all recorded by an earlier crawl; compounds already stored count against the
    budget as single candidates do, so the same crawl again tries none (and does not even prepare
    the project for them) and a budget larger by one tries one more."""
    repos = write_repos(compound_store.parent / "again.txt", [f"{FIXTURES / 'stocksync'} {CA_OVERRIDE}"])
    args = ["crawl", "--repos", repos, "--types", PART_TYPES, "--budget", "6", "--compound", "2"]

    def figures() -> tuple[int, int, int]:
        done = run_miner(compound_store, "stats", "--json")
        assert done.returncode == 0, done.stderr
        numbers = json.loads(done.stdout)
        compounds = numbers["by_type"].get("compound/2", {})
        return numbers["tried"], compounds.get("tried", 0), numbers["tasks"]

    tried, compounds, tasks = figures()
    assert compounds == 2
    again = run_miner(compound_store, *args, "--compound-budget", "2")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert figures() == (tried, compounds, tasks)
    assert "stacking 2 validated" not in again.stdout + again.stderr  # the budget is spent: no unit prepares
    more = run_miner(compound_store, *args, "--compound-budget", "3")
    assert more.returncode == 0, more.stdout[-2000:] + more.stderr[-2000:]
    assert "stacking 2 validated" in more.stdout + more.stderr
    now = figures()
    assert now[:2] == (tried + 1, compounds + 1)
    assert now[2] - tasks in (0, 1)


@pytest.mark.slow
def test_overlapping_parts_are_refused(compound_store: Path) -> None:
    """Two deleted files of python-dateutil: either part's fix reinstalls the whole distribution, so
    with one part fixed the other's symptom is gone too (and the graph puts them on one branch)."""
    from miner.compound import judge
    from miner.graph import build_graph
    from miner.inverters.procedural import ProceduralInverter
    from miner.inverters.targets import enumerate_targets
    from miner.prepare import prepare
    from miner.sandbox.local import LocalBackend
    from miner.store import Store
    from miner.tasks import make_task
    from miner.validate import Context, healthy_manifest, validate

    itype = CATALOGUE["deps/submodule-deleted"]
    with Store(compound_store) as store:
        source = store.list_tasks()[0]
        backend = LocalBackend()
        prepared = prepare(source.source, backend, store, commit=source.commit)
    project, state = prepared.project, prepared.state
    ctx = Context(backend, prepared.env, state, healthy_manifest(backend, prepared.env))
    targets = {t.key: t for t in enumerate_targets(project, state)}
    parts = []
    for key in ("submodule:dateutil.parser", "submodule:dateutil.tz"):
        inversion = ProceduralInverter([itype]).apply(project, state, targets[key], itype)
        candidate = validate(ctx, inversion)
        assert candidate.status == "validated", candidate.detail
        parts.append(make_task(project, state, candidate, itype, backend.name))
    assert not stand_apart(parts[0], parts[1], build_graph(project, state))
    candidate = judge(ctx, compound_inversion(parts, CATALOGUE), parts, CATALOGUE)
    assert (candidate.status, candidate.rule) == ("rejected", "overlapping-parts"), candidate.detail
    assert "another part's fix repairs its symptom" in candidate.detail


@pytest.mark.slow
@pytest.mark.docker
def test_an_exported_compound_passes_check(compound_store: Path, tmp_path: Path) -> None:
    compounds = stored(compound_store, "--type", "compound/2")
    assert compounds
    out = tmp_path / "harbor"
    done = run_miner(compound_store, "export", "--format", "harbor", "-o", out, "--type", "compound/2",
                     "--limit", "1", "--variant", "hinted", timeout=3600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    folder = next(out.iterdir())
    assert folder.name.endswith("__hinted")
    config = (folder / "task.toml").read_text()
    assert 'instruction_variant = "hinted"' in config and "compound_parts" in config
    assert "separate things are broken" in (folder / "instruction.md").read_text()
    checked = run_miner(compound_store, "check", folder, "--json", timeout=3600)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    result = json.loads(checked.stdout)[0]
    assert (result["nop"], result["oracle"]) == (0.0, 1.0)
