"""Archives and cache entries shared by the sources: a registry's archive (an sdist, an npm
tarball) kept once in a locked cache entry, checked by sha256, unpacked refusing unsafe members.

miner.sources and the ecosystems' registry sources (miner.ecosystems.python.registry,
miner.ecosystems.node.registry) use these; FetchError is the one error a fetch raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import re
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
REGISTRY_TIMEOUT = 900  # a registry's download (pip download, npm pack)


class FetchError(Exception):
    """A source could not be fetched; `reason` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Serialise work on one cache entry across processes that crawl in parallel."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "project"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_archive(entry: Path) -> Path | None:
    found = [p for p in entry.glob("*") if p.is_file() and p.name.endswith(SDIST_SUFFIXES)]
    return found[0] if len(found) == 1 else None


def unpack_archive(sdist: Path, dest: Path) -> None:
    """Unpack a .tar.* or .zip archive into the new folder dest, refusing unsafe members."""
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        if sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as archive:
                _extract_zip(archive, tmp)
        else:
            with tarfile.open(sdist) as archive:
                extract_tar(archive, tmp, strict=True)
    except (tarfile.TarError, zipfile.BadZipFile, OSError, FetchError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = exc.reason if isinstance(exc, FetchError) else str(exc)
        raise FetchError(f"cannot unpack {sdist.name}: {reason}") from None
    publish(tmp, dest)


def publish(tmp: Path, final: Path) -> None:
    """Move a finished folder into place, so a half-written folder is never seen as done."""
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.chmod(0o755)  # mkdtemp makes 0700 folders; sandboxes may read as another user
        tmp.rename(final)


# --- git


def archive_root(unpacked: Path) -> Path:
    """The sdist's single top folder (NAME-VERSION/), or the unpack folder itself."""
    entries = list(unpacked.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return unpacked


def extract_tar(archive: tarfile.TarFile, dest: Path, strict: bool) -> None:
    """Extract refusing paths outside dest, devices and (strict) links leaving dest.

    Git trees keep their symlinks as they are (the "tar" filter); sdists from an index get the
    stricter "data" filter.
    """
    try:
        archive.extractall(dest, filter="data" if strict else "tar")
    except tarfile.FilterError as exc:
        raise FetchError(f"unsafe archive member: {exc}") from None


def _extract_zip(archive: zipfile.ZipFile, dest: Path) -> None:
    root = dest.resolve()
    for member in archive.infolist():
        target = (root / member.filename).resolve()
        if member.filename.startswith("/") or not target.is_relative_to(root):
            raise FetchError(f"unsafe archive member: {member.filename!r} leaves the folder")
    archive.extractall(root)
