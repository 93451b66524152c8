"""Disk space: the crawl's guard against filling the disk, and sizes of folders for `miner gc`.

    check_free_space(store.root, min_free_gb)   # raises LowDisk when the file system runs low
    tree_size(folder)                           # bytes of the files under a folder

This module imports nothing of miner, so any stage may call it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

GB = 1_000_000_000


class LowDisk(Exception):
    """Free space of the store's file system fell under the crawl's threshold."""


def check_free_space(path: Path, min_free_gb: float) -> None:
    """Raise LowDisk (a one-line message naming the threshold, the free space and `miner gc`)
    when the file system holding `path` has less than `min_free_gb` GB free."""
    if min_free_gb <= 0:
        return
    free = shutil.disk_usage(path).free
    if free < min_free_gb * GB:
        raise LowDisk(f"stopped: {human(free)} free on the store's file system ({path}), under --min-free-gb "
                      f"{min_free_gb:g}; free space with `miner gc` (or lower --min-free-gb) and crawl again")


def tree_size(path: Path) -> int:
    """Bytes used by the regular files under `path` (the file itself for a file; symlinks not followed)."""
    path = Path(path)
    if path.is_symlink():
        return 0
    if path.is_file():
        return path.stat().st_size
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                stat = os.lstat(os.path.join(folder, name))
            except OSError:
                continue  # removed while we walked
            if not os.path.islink(os.path.join(folder, name)):
                total += stat.st_size
    return total


def human(size: float) -> str:
    """Bytes as a short decimal size: 0 B, 512 B, 1.2 kB, 3.4 MB, 5.6 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(size) < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"  # unreachable: the loop returns at GB
