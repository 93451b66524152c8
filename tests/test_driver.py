"""The crawl's driver (miner.pipeline) without a crawl: units' results fed to it in any order are
recorded in the store in the projects' batch order, so that what is stored does not depend on
the executor or on timing (duplicate-symptom and --max-tasks-per-repo across batches); and the
order in which executors hand waiting units to workers (miner.executors.base.Waiting)."""

from __future__ import annotations

from pathlib import Path

from dataclasses import replace

from miner.executors.base import Waiting
from miner.mine import Batch, CandidateEvent, CrawlOptions, Event, ProjectEvent, ProjectReport, UnitResult
from miner.models import Candidate, Inversion, Source, Target, Task
from miner.pipeline import Recorder, _Driver
from miner.store import Store

REPO = "https://example.org/acme/greeter.git"
COMMIT = "c0ffee"
KEY = "0123456789abcdef"


def inversion(n: int) -> Inversion:
    target = Target(kind="data", name=f"data/file{n}.txt", path=f"data/file{n}.txt")
    return Inversion(type_id="data/truncate", family="data", target=target, break_script=f": > data/file{n}.txt\n",
                     fix_script=f"echo {n} > data/file{n}.txt\n", summary=f"truncate file{n}")


def judged(n: int, f2p: list[str], source: Source) -> Event:
    """A validated candidate's event, as a unit emits it."""
    inv = inversion(n)
    candidate = Candidate(id=f"cand{n:012d}", repo=REPO, commit=COMMIT, inversion=inv, status="validated", f2p=f2p,
                          p2p=["tests/test_b.py::test_kept"])
    task = Task(id=candidate.id, repo=REPO, commit=COMMIT, source=source, type_id=inv.type_id, family=inv.family,
                target=inv.target, summary=inv.summary, break_script=inv.break_script, fix_script=inv.fix_script,
                f2p=f2p, p2p=candidate.p2p)
    return CandidateEvent(project_key=KEY, repo=REPO, commit=COMMIT, candidate=candidate, task=task,
                 files={"break.sh": inv.break_script})


def batch_result(number: int, events: list[Event]) -> UnitResult:
    report = ProjectReport(source=REPO, repo=REPO, tried=len(events), validated=len(events), key=KEY, commit=COMMIT,
                           started=100.0 + number, ended=200.0 + number,
                           by_type={"data/truncate": [len(events), len(events)]})
    return UnitResult(report, events=events)


def drive(tmp_path: Path, options: CrawlOptions, batches: dict[int, list[Event]], order: list[int]) -> Store:
    """A project unit that split into batches, then the batches' results in `order`."""
    store = Store(tmp_path / "store")
    source = Source(raw=REPO, kind="git", location=REPO, origin="repos.txt:1")
    driver = _Driver(store, options, Recorder(store), lambda name, text: None)
    [unit] = driver.units([source], [], str(tmp_path / "cache"))
    plan = [Batch(number=n, of=len(batches), commit=COMMIT, inversions=[inversion(n)], budget=1) for n in batches]
    head = ProjectReport(source=REPO, repo=REPO, key=KEY, commit=COMMIT, started=100.0, ended=101.0)
    project_event = ProjectEvent(project_key=KEY, repo=REPO, commit=COMMIT, source=source)
    more = driver.finish(unit, UnitResult(head, batches=plan, events=[project_event]))
    assert [u.batch.number for u in more if u.batch] == sorted(batches)
    for number in order:
        follow = driver.finish(more[number - 1], batch_result(number, batches[number]))
        assert follow == []
    return store


def test_a_symptom_found_by_two_batches_is_kept_once_in_batch_order(tmp_path: Path) -> None:
    source = Source(raw=REPO, kind="git", location=REPO, origin="repos.txt:1")
    same = ["tests/test_a.py::test_one"]
    batches = {1: [judged(1, same, source)], 2: [judged(2, same, source)], 3: [judged(3, ["tests/t.py::x"], source)]}
    store = drive(tmp_path, CrawlOptions(), batches, order=[3, 2, 1])  # the last batch finishes first
    tasks = {task.id for task in store.list_tasks()}
    assert tasks == {"cand000000000001", "cand000000000003"}  # batch 1 owns the shared symptom
    verdicts = store.verdicts(REPO)
    assert verdicts["cand000000000002"]["rule"] == "duplicate-symptom"
    assert "earlier batch" in verdicts["cand000000000002"]["detail"]
    [row] = [p for p in store.projects() if p["key"] == KEY]
    assert row["status"] == "mined" and row["seconds"] >= 100.0  # first start to last end of its units
    assert store.stats()["by_project"][REPO]["validated"] == 2


def test_tasks_beyond_the_limit_are_not_stored(tmp_path: Path) -> None:
    source = Source(raw=REPO, kind="git", location=REPO, origin="repos.txt:1")
    batches = {n: [judged(n, [f"tests/t.py::test_{n}"], source)] for n in (1, 2, 3)}
    store = drive(tmp_path, CrawlOptions(max_tasks_per_repo=2), batches, order=[2, 3, 1])
    assert {task.id for task in store.list_tasks()} == {"cand000000000001", "cand000000000002"}
    assert "cand000000000003" not in store.verdicts(REPO)  # not stored at all: a later crawl tries it again


def test_compound_tasks_are_counted_apart_from_the_limit(tmp_path: Path) -> None:
    """--max-tasks-per-repo caps single tasks; a compound validated after the cap is reached is
    stored (--compound-budget limits compounds), not dropped after the work was spent on it."""
    source = Source(raw=REPO, kind="git", location=REPO, origin="repos.txt:1")
    compound = judged(9, ["tests/t.py::test_1", "tests/t.py::test_2"], source)
    assert compound.candidate is not None and compound.task is not None
    stacked = compound.candidate.inversion.model_copy(update={"type_id": "compound/2", "family": "compound"})
    compound = compound.model_copy(update={
        "candidate": compound.candidate.model_copy(update={"inversion": stacked}),
        "task": compound.task.model_copy(update={"type_id": "compound/2", "family": "compound"})})
    batches = {1: [judged(1, ["tests/t.py::test_1"], source)], 2: [judged(2, ["tests/t.py::test_2"], source)],
               3: [judged(3, ["tests/t.py::test_3"], source), compound]}
    store = drive(tmp_path, CrawlOptions(max_tasks_per_repo=2), batches, order=[3, 1, 2])
    assert {task.id for task in store.list_tasks()} == {"cand000000000001", "cand000000000002", "cand000000000009"}


def test_a_begun_projects_batches_go_before_the_next_projects_unit(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    sources = [Source(raw=f"{REPO}{n}", kind="git", location=f"{REPO}{n}", origin=f"repos.txt:{n}") for n in (1, 2, 3)]
    driver = _Driver(store, CrawlOptions(), Recorder(store), lambda name, text: None)
    waiting = Waiting(driver.units(sources, [], str(tmp_path / "cache")))
    first, second = waiting.pop(), waiting.pop()  # two workers
    assert [(unit.index, unit.batch) for unit in (first, second)] == [(0, None), (1, None)]
    for number in (2, 1):  # pushed in any order
        waiting.push(replace(first, batch=Batch(number=number, of=2, commit=COMMIT, inversions=[], budget=1)))
    waiting.push(replace(second, batch=Batch(number=1, of=1, commit=COMMIT, inversions=[], budget=1, compounds=2)))
    order = [(unit.index, unit.batch.number if unit.batch else 0) for unit in (waiting.pop() for _ in range(4))]
    assert order == [(0, 1), (0, 2), (1, 1), (2, 0)]
    assert not waiting


def test_options_and_events_refuse_invalid_values_when_made() -> None:
    """CrawlOptions' choices are Literals checked when the options are made (dataclasses.replace
    too); an event carries exactly its kind's fields, so a candidate event without a candidate, or
    an unknown kind, cannot be made."""
    import pydantic
    import pytest
    from pydantic import TypeAdapter

    from miner.mine import LlmEvent

    with pytest.raises(pydantic.ValidationError, match="backend"):
        CrawlOptions(backend="podman")  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError, match="executor"):
        replace(CrawlOptions(), executor="slurm")  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError, match="candidate"):
        CandidateEvent(project_key=KEY)  # type: ignore[call-arg]
    adapter = TypeAdapter(Event)
    assert isinstance(adapter.validate_python({"kind": "llm", "calls": [{"tokens": 3}]}), LlmEvent)
    with pytest.raises(pydantic.ValidationError):
        adapter.validate_python({"kind": "gossip"})
