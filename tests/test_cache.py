"""The shared cache folder (`crawl --cache-dir`): trimmed to a size limit, least recently used first,
never what a crawl is using; `miner gc --cache-dir` does the same on request."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from conftest import run_miner
from miner.gc import USE_LOCK, trim_cache
from miner.store import Store

KB = 1000


def make_file(path: Path, size: int, age: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))


def make_workspace(cache: Path, key: str, size: int, age: float, forks: int = 0) -> Path:
    """A built workspace as the local backend leaves it, last used `age` seconds ago."""
    folder = cache / "work" / key
    make_file(folder / "healthy" / "venv" / "lib.bin", size, age)
    for n in range(forks):
        make_file(folder / "forks" / f"fork{n}" / "upper" / "junk", 10 * KB, age)
    make_file(folder / USE_LOCK, 0, age)
    make_file(folder / "build.json", 2, age)
    for path in (folder / USE_LOCK, folder / "build.json"):
        os.utime(path, (time.time() - age, time.time() - age))
    return folder


def make_source(cache: Path, name: str, size: int, age: float) -> Path:
    entry = cache / "cache" / "sources" / "pypi" / name
    make_file(entry / "pkg.tar.gz", size, age)
    make_file(entry.with_suffix(".lock"), 0, age)
    os.utime(entry, (time.time() - age, time.time() - age))
    return entry


def build_cache(cache: Path) -> dict[str, Path]:
    return {
        "old-source": make_source(cache, "old-1.0", 100 * KB, age=5000),
        "old-workspace": make_workspace(cache, "0" * 16, 300 * KB, age=4000, forks=2),
        "wheel": cache / "work" / "cache" / "pip" / "wheels" / "a.whl",
        "new-workspace": make_workspace(cache, "1" * 16, 300 * KB, age=10),
        "new-source": make_source(cache, "new-2.0", 100 * KB, age=5),
    }


def test_trim_evicts_least_recently_used_first_down_to_the_limit(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entries = build_cache(cache)
    make_file(entries["wheel"], 50 * KB, age=3000)
    report = trim_cache(cache, limit=450 * KB)
    freed = [f.name for f in report.freed]
    # forks of an idle workspace go first, then the oldest entries until 450 kB is left
    assert freed[:2] == [f"work/{'0' * 16}/forks/fork0", f"work/{'0' * 16}/forks/fork1"]
    assert freed[2:] == ["sources/pypi/old-1.0", f"work/{'0' * 16}", "pip/wheels/a.whl"]
    assert not entries["old-source"].exists() and not entries["old-workspace"].exists()
    assert entries["new-workspace"].is_dir() and entries["new-source"].is_dir()
    assert (cache / ".trimmed").exists()


def test_trim_keeps_a_workspace_a_crawl_holds(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entries = build_cache(cache)
    with open(entries["old-workspace"] / USE_LOCK, "a") as held:  # what a unit mining it holds
        fcntl.flock(held, fcntl.LOCK_SH)
        report = trim_cache(cache, limit=0)
    assert entries["old-workspace"].is_dir()
    assert (entries["old-workspace"] / "forks" / "fork0").is_dir()  # its forks may be in use too
    assert f"work/{'0' * 16} is in use: kept" in report.notes
    assert not entries["new-workspace"].exists() and not entries["new-source"].exists()


def test_a_dry_run_removes_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entries = build_cache(cache)
    report = trim_cache(cache, limit=0, dry_run=True)
    assert report.dry_run and report.bytes()["cache"] > 600 * KB
    assert all(path.exists() for name, path in entries.items() if name != "wheel")


def test_gc_trims_a_shared_cache_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entries = build_cache(cache)
    Store(tmp_path / "store").close()
    done = run_miner(tmp_path / "store", "gc", "--json", "--no-images", "--cache-dir", cache,
                     "--cache-limit-gb", "0.00045")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    names = [f["name"] for f in report["freed"]]
    assert "sources/pypi/old-1.0" in names and f"work/{'0' * 16}" in names
    assert entries["new-source"].is_dir() and entries["new-workspace"].is_dir()
