"""Deterministic archives of a project folder for exported build contexts.

    data = project_tarball(root)          # .tar.gz with a top folder "project/", byte-stable

Sorted entries, one fixed mtime, root-owned, modes kept, VCS data and caches left out: exporting
twice gives the same bytes.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox", ".nox", ".hg", ".svn"}
# 1980-01-02 00:00 UTC, not 0: a build backend that zips the files with their own mtimes (flit_core,
# itsdangerous's and Flask's) refuses a date before 1980 ("ZIP does not support timestamps before
# 1980"), and a day's margin keeps it 1980 in every time zone.
FIXED_MTIME = 315_619_200


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = FIXED_MTIME
    return info


def walk(root: Path) -> Iterable[Path]:
    """Every folder and file under root, VCS data and caches left out."""
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in dirs + files:
            yield base / name


def project_tarball(root: Path, prefix: str = "project", include: Callable[[str], bool] | None = None) -> bytes:
    """A deterministic .tar.gz of the project folder (sorted, FIXED_MTIME, root-owned, modes kept);
    `include` filters by project-relative path."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(root), arcname=prefix, recursive=False, filter=_tar_filter)
        for path in sorted(walk(root), key=lambda p: p.relative_to(root).as_posix()):
            if include is not None and not include(path.relative_to(root).as_posix()):
                continue
            tar.add(str(path), arcname=f"{prefix}/{path.relative_to(root).as_posix()}", recursive=False,
                    filter=_tar_filter)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9, filename="") as handle:
        handle.write(raw.getvalue())
    return out.getvalue()
