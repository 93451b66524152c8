"""PyPI sources: `pypi:NAME==VERSION`, an sdist from the package index that ships its tests.

The file comes straight from the index's JSON API (its sha256 checked); `pip download` is the
fallback for an index without one. miner.sources calls these through miner.ecosystems.SOURCES.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from miner.ecosystems.base import Published, RegistrySource
from miner.ecosystems.python.install import pip_errors
from miner.models import Project, Source
from miner.archives import (
    REGISTRY_TIMEOUT,
    SDIST_SUFFIXES,
    FetchError,
    archive_root,
    cached_archive,
    file_sha256,
    locked,
    unpack_archive,
)

DOWNLOAD_TIMEOUT = 120  # seconds without data before an sdist download gives up
PYPI_URL = "https://pypi.org/pypi"  # the index's JSON API
HTTP_TIMEOUT = 60


def parse(text: str) -> str:
    """The location NAME==VERSION of `pypi:NAME==VERSION` (ValueError: not an exact pin)."""
    name, sep, version = text.partition("==")
    if not sep or not version or any(c in version for c in "=<>!~*,; "):
        raise ValueError(f"pypi source needs an exact pin NAME==VERSION, got 'pypi:{text}'")
    try:
        canonicalize_name(name, validate=True)
    except InvalidName:
        raise ValueError(f"invalid package name {name!r}") from None
    try:
        Version(version)
    except InvalidVersion:
        raise ValueError(f"invalid version {version!r} for {name}") from None
    return f"{name}=={version}"


def repo_name(location: str) -> str:
    """The repository name of a PyPI source (Project.repo)."""
    return f"pypi:{canonicalize_name(location.split('==')[0])}"


def identity(location: str) -> str:
    """What makes two PyPI sources the same (the name normalised, the version parsed)."""
    name, version = location.split("==")
    return f"{canonicalize_name(name)}=={Version(version)}"


def cache_entry(cache: Path, location: str) -> Path:
    """The cache folder of a PyPI source."""
    name, version = location.split("==")
    return cache / "pypi" / f"{canonicalize_name(name)}-{version}"


class IndexUnreachable(FetchError):
    """The index's JSON API did not answer (other than "no such project")."""


_UNREACHABLE: set[str] = set()  # JSON APIs that did not answer this process (index_sdist asks them no more)


def index_json(name: str, index: str = PYPI_URL) -> dict[str, Any] | None:
    """The index's JSON description of a project (None when the project does not exist)."""
    url = f"{index.rstrip('/')}/{urllib.parse.quote(name)}/json"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as answer:
            data = json.load(answer)
            base = answer.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise IndexUnreachable(f"the index answered {exc.code} for {name}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise IndexUnreachable(f"cannot reach the index: {getattr(exc, 'reason', exc)}") from None
    for files in (data.get("releases") or {}).values():  # mirrors answer with URLs relative to the page
        for item in files:
            if item.get("url"):
                item["url"] = urllib.parse.urljoin(base, item["url"])
    return data


def index_sdist(name: str, version: str, index: str = PYPI_URL) -> dict[str, Any] | None:
    """The index's sdist file entry (url, digests, ...) of exactly this release, a .tar.gz first;
    None when the index does not list one, or does not answer (then it is not asked again by this
    process: behind a mirror without pypi.org, each ask could wait HTTP_TIMEOUT)."""
    if index in _UNREACHABLE:
        return None
    try:
        data = index_json(name, index)
    except IndexUnreachable:
        _UNREACHABLE.add(index)
        return None
    releases = (data or {}).get("releases") or {}
    files = next((f for text, f in releases.items() if _same_version(text, version)), [])
    sdists = [f for f in files if f.get("packagetype") == "sdist" and f.get("url")]
    sdists.sort(key=lambda f: (bool(f.get("yanked")), not str(f.get("filename", "")).endswith(".tar.gz")))
    return sdists[0] if sdists else None


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def fetch(source: Source, cache: Path, url: str | None = None, sha256: str | None = None) -> Project:
    name, version = source.location.split("==")
    entry = cache_entry(cache, source.location)
    with locked(entry.with_suffix(".lock")):
        sdist = cached_archive(entry)
        if sdist is None and url is None:
            # The file straight from the index: `pip download` would also build the sdist's
            # metadata, and so fail on build dependencies it cannot install (the build stage
            # reports those). pip stays the fallback for indexes without a JSON API.
            found = index_sdist(name, version) or {}
            url, sha256 = found.get("url"), (found.get("digests") or {}).get("sha256")
        sdist = sdist or (_download_url(url, sha256, entry) if url else _download_sdist(name, version, entry))
        sha = file_sha256(sdist)
        unpacked = entry / f"src-{sha[:12]}"
        if not unpacked.exists():
            unpack_archive(sdist, unpacked)
    return Project(source=source, repo=repo_name(source.location), commit=sha, path=archive_root(unpacked))


def _download_sdist(name: str, version: str, entry: Path) -> Path:
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix=".download-") as tmp:
        # --no-binary NAME, not :all:, so build dependencies may still come as wheels.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
               f"{name}=={version}", "-d", tmp, "--disable-pip-version-check", "--no-input"]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=REGISTRY_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download of {name}=={version} timed out after {REGISTRY_TIMEOUT}s") from None
        files = [p for p in Path(tmp).iterdir() if p.name.endswith(SDIST_SUFFIXES)]
        if run.returncode != 0 or len(files) != 1:
            raise FetchError(_pip_reason(name, version, run.stdout + run.stderr))
        sdist = entry / files[0].name
        files[0].rename(sdist)
    return sdist


def _download_url(url: str, sha256: str | None, entry: Path) -> Path:
    """Download one sdist file from the index into the cache entry, checking its sha256."""
    entry.mkdir(parents=True, exist_ok=True)
    filename = Path(urlsplit(url).path).name
    if not filename.endswith(SDIST_SUFFIXES):
        raise FetchError(f"not an sdist file: {filename}")
    with tempfile.TemporaryDirectory(dir=entry, prefix=".download-") as tmp:
        part = Path(tmp) / filename
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as answer, open(part, "wb") as out:
                for block in iter(lambda: answer.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
        except (OSError, ValueError) as exc:
            raise FetchError(f"cannot download {filename}: {exc}") from None
        if sha256 and digest.hexdigest() != sha256.lower():
            raise FetchError(f"{filename} does not match the index's sha256 (download corrupted)")
        sdist = entry / filename
        part.rename(sdist)
    return sdist


def _pip_reason(name: str, version: str, output: str) -> str:
    errors = pip_errors(output)
    detail = errors[0] if errors else (output.strip().splitlines() or ["no output"])[-1]
    if "to install build dependencies did not run successfully" in output:
        return f"the build dependencies of {name}=={version}'s sdist cannot be installed ({detail})"
    if "No matching distribution" in output or "Could not find a version" in output:
        return f"no sdist of {name}=={version} on the package index ({detail})"
    return f"pip download of {name}=={version} failed: {detail}"


INDEX_HOSTS = ("pypi.org", "files.pythonhosted.org")  # pip's default index and where it serves files
PIP_URL_VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_PROXY")
_SDIST_FETCH = """\
"$MINER_PYTHON" -m pip download -q --no-deps --no-binary {name} {pin} -d "$D"
tar --no-same-owner -xzf "$D"/*.tar.gz -C "$D"
"""


def published(location: str) -> Published:
    """The sdist of NAME==VERSION on the index pip uses (its files are the project's files)."""
    name, version = (part.strip() for part in location.split("==", 1))
    fetch = _SDIST_FETCH.format(name=shlex.quote(name), pin=shlex.quote(f"{name}=={version}")).strip()
    return Published(label=f"{name}=={version}", holds="its sdist", fetch=fetch,
                     extra={"sdist_name": name, "sdist_version": version})


def index_hosts(env: dict[str, str]) -> list[str]:
    """The hosts pip reaches in an image whose environment is `env`: its default index's, unless
    PIP_INDEX_URL names another, and the hosts of the other PIP_* URLs."""
    hosts = [] if env.get("PIP_INDEX_URL") else list(INDEX_HOSTS)
    for name in PIP_URL_VARIABLES:
        for url in env.get(name, "").split():
            host = urlsplit(url).hostname
            if host and host not in hosts:
                hosts.append(host)
    return hosts


SOURCE = RegistrySource(prefix="pypi", parse=parse, name=repo_name, entry=cache_entry, fetch=fetch, identity=identity,
                        published=published, hosts=index_hosts)
