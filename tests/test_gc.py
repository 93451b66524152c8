"""`miner gc` on a real store, and the crawl's disk guard."""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path

import pytest

from conftest import FIXTURES, run_miner, write_repos
from miner.gc import GcReport, collect_images, read_needs
from miner.models import content_id
from miner.pipeline import CrawlOptions, crawl
from miner.store import Store

RUNNING_KEY = "0123456789abcdef"


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store: fixtures/textkit mined with --budget 2 (tasks), bad/no-tests skipped (no task)."""
    root = tmp_path_factory.mktemp("gc")
    repos = write_repos(root / "repos.txt", [FIXTURES / "textkit", FIXTURES / "bad" / "no-tests"])
    done = run_miner(root / "store", "crawl", "--repos", repos, "--budget", "2", "--seed", "0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "store"


def keys(store_root: Path) -> tuple[str, str]:
    """(key of the project with tasks, key of the skipped project)."""
    with Store(store_root) as store:
        with_tasks = store.task_project_keys()
        assert len(with_tasks) == 1, "textkit should give at least one task with --budget 2"
        others = [p["key"] for p in store.projects() if p["key"] not in with_tasks and p["status"] == "skipped"]
    assert others
    return next(iter(with_tasks)), others[0]


def gc(store_root: Path, *args: str) -> dict:
    done = run_miner(store_root, "gc", "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.docker
def test_gc_images_keeps_what_tasks_need_and_other_stores_images(crawled: Path) -> None:
    import docker

    needed_key, spare_key = keys(crawled)
    client = docker.from_env()
    tag = f"miner-gc-test/{uuid.uuid4().hex[:8]}"
    made: list[str] = []

    def build(name: str, labels: dict[str, str], parent: str = "miner/base:bookworm", tags: tuple[str, ...] = ()):
        text = f"FROM {parent}\nRUN echo {name} {uuid.uuid4().hex} > /gc-test-{name}\n"
        image, _ = client.images.build(fileobj=io.BytesIO(text.encode()), labels={"miner": "1", **labels},
                                       tag=f"{tag}-{name}:latest", rm=True, pull=False)
        for extra in tags:
            repo, _, version = extra.partition(":")
            image.tag(repo, version or "latest")
        made.extend([f"{tag}-{name}:latest", *tags])
        return client.images.get(image.id)

    try:
        with Store(crawled) as store:
            task = store.list_tasks()[0]
            needs = read_needs(store)
        needed = build("needed", {"miner.kind": "healthy", "miner.project": needed_key})
        spare = build("spare", {"miner.kind": "healthy", "miner.project": spare_key})
        foreign = build("foreign", {"miner.kind": "healthy", "miner.project": "ffffffffffffffff"})
        snapshot = f"miner/broken-{content_id(needed.id, task.break_script)}:latest"
        kept_broken = build("kept-broken", {"miner.kind": "broken", "miner.healthy": needed.id},
                            parent=needed.id, tags=(snapshot,))
        stray_broken = build("stray-broken", {"miner.kind": "broken", "miner.healthy": needed.id}, parent=needed.id)
        spare_broken = build("spare-broken", {"miner.kind": "broken", "miner.healthy": spare.id}, parent=spare.id)

        dry = GcReport(dry_run=True)
        collect_images(client, needs, dry)
        assert all(client.images.get(i.id) for i in (spare, stray_broken, spare_broken))  # a dry run removes nothing
        report = GcReport(dry_run=False)
        collect_images(client, needs, report)
        removed = {f.name.split(", ")[0] for f in report.freed}
        assert removed == {f"{tag}-spare:latest", f"{tag}-stray-broken:latest", f"{tag}-spare-broken:latest"}
        assert [f.name for f in dry.freed] == [f.name for f in report.freed]
        assert report.bytes()["images"] > 0
        assert any("does not know" in note for note in report.notes)
        for image in (needed, foreign, kept_broken):
            assert client.images.get(image.id)
        for image in (spare, stray_broken, spare_broken):
            with pytest.raises(docker.errors.ImageNotFound):
                client.images.get(image.id)
    finally:
        for ref in reversed(made):
            try:
                client.images.remove(ref, force=True)
            except docker.errors.NotFound:
                pass


@pytest.mark.slow
def test_gc_frees_work_and_cache_no_task_needs(crawled: Path) -> None:
    needed_key, spare_key = keys(crawled)
    work = crawled / "work"
    assert (work / needed_key).is_dir() and (work / spare_key).is_dir()
    stale_fork = work / needed_key / "forks" / "c0ffee000000"
    (stale_fork / "ws").mkdir(parents=True)
    (stale_fork / "ws" / "left-by-a-killed-crawl").write_bytes(b"x" * 5000)
    (stale_fork / "ws").chmod(0o500)  # a break script may leave folders read-only
    with Store(crawled) as store:
        running = str(FIXTURES / "weather-report")  # another crawl is on this one now
        store.record_project(RUNNING_KEY, running, "abc", running, "", "running")
    (work / RUNNING_KEY).mkdir()
    (work / RUNNING_KEY / "busy").write_text("in use")

    dry = gc(crawled, "--dry-run", "--no-images", "--cache-limit-gb", "1000")
    names = {f["name"] for f in dry["freed"]}
    assert names == {spare_key, f"{needed_key}/forks/c0ffee000000"}
    assert (work / spare_key).is_dir() and stale_fork.is_dir()  # nothing removed

    done = gc(crawled, "--no-images", "--cache-limit-gb", "1000")
    assert done["bytes"]["work"] == dry["bytes"]["work"] > 5000
    assert not (work / spare_key).exists() and not stale_fork.exists()
    assert (work / needed_key).is_dir() and (work / RUNNING_KEY / "busy").is_file()
    assert any("running" in note for note in done["notes"])

    with Store(crawled) as store:
        task_id = store.list_tasks()[0].id
    replay = run_miner(crawled, "replay", task_id)  # what the task needs is still there
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]

    cached = sum(f.stat().st_size for f in (crawled / "cache" / "sources").rglob("*") if f.is_file())
    trimmed = gc(crawled, "--no-images", "--cache-limit-gb", "0")
    assert trimmed["bytes"]["cache"] >= cached > 0
    assert not any((crawled / "cache" / "sources" / "local").iterdir())
    assert "pip cache" in " ".join(trimmed["notes"])  # not trimmed while a project is marked running
    summary = run_miner(crawled, "gc", "--dry-run", "--no-images")
    assert summary.returncode == 0 and summary.stdout.startswith("would free 0 B: work 0 B (0), images 0 B (0)")


# -- the disk guard ---------------------------------------------------------------------------


def test_crawl_stops_when_free_space_is_under_the_threshold(tmp_path: Path) -> None:
    repos = write_repos(tmp_path / "repos.txt", [FIXTURES / "textkit", FIXTURES / "weather-report"])
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    threshold = f"{free_gb + 1000:.0f}"
    done = run_miner(tmp_path / "store", "crawl", "--repos", repos, "--min-free-gb", threshold)
    assert done.returncode == 1
    message = done.stderr.strip().splitlines()
    assert len(message) == 1 and "Traceback" not in done.stderr
    assert f"--min-free-gb {threshold}" in message[0] and "GB free" in message[0] and "miner gc" in message[0]
    stats = json.loads(run_miner(tmp_path / "store", "stats", "--json").stdout)
    assert {p["status"] for p in stats["by_project"].values()} == {"skipped"}
    assert all("--min-free-gb" in p["reason"] for p in stats["by_project"].values())
    assert not list((tmp_path / "store" / "cache" / "sources").glob("*/*"))  # stopped before fetching


@pytest.mark.slow
def test_disk_guard_between_candidates(tmp_path: Path) -> None:
    repos = write_repos(tmp_path / "repos.txt", [FIXTURES / "textkit"])
    options = CrawlOptions(budget=3, min_free_gb=0.001)
    seen: list[str] = []

    def phase(project: str, text: str) -> None:
        seen.append(text)
        if text.startswith("candidate 1/"):  # the disk "fills" while the first candidate runs
            options.min_free_gb = shutil.disk_usage(tmp_path).free / 1e9 + 1000

    with Store(tmp_path / "store") as store:
        report = crawl(repos, store, options, on_phase=phase)
    project = report.projects[0]
    assert project.stopped and project.status == "skipped" and "--min-free-gb" in project.reason
    assert not any(text.startswith("candidate 2/") for text in seen)
    with Store(tmp_path / "store") as store:
        assert store.projects()[0]["status"] == "skipped"  # not left 'running': gc may clean it
        # unrecoverable pairs are judged (and counted) before any candidate runs; then one ran
        unrecoverable = store.stats()["by_rule"].get("unrecoverable", 0)
    assert project.tried == unrecoverable + 1
