"""npm sources: `npm:NAME@VERSION`, the registry's tarball, kept only when it ships a suite miner
can run. miner.sources calls these through miner.ecosystems.SOURCES.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from urllib.parse import urlsplit
import tempfile
from pathlib import Path

from miner.ecosystems.base import Published, RegistrySource
from miner.ecosystems.node.npm import host_command
from miner.ecosystems.node.runner import suite_problem
from miner.models import Project, Source
from miner.archives import (
    REGISTRY_TIMEOUT,
    FetchError,
    archive_root,
    cached_archive,
    file_sha256,
    locked,
    slug,
    unpack_archive,
)

NPM_NAME = re.compile(r"^(@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def parse(text: str) -> str:
    """The location NAME@VERSION of `npm:NAME@VERSION` (ValueError: not an exact version)."""
    name, sep, version = text.rpartition("@")
    if not sep or not name or not version:
        raise ValueError(f"npm source needs an exact version NAME@VERSION, got 'npm:{text}'")
    if not NPM_NAME.match(name):
        raise ValueError(f"invalid npm package name {name!r}")
    if not _SEMVER.match(version):
        raise ValueError(f"npm source needs an exact version (x.y.z), got {version!r} for {name}")
    return f"{name}@{version}"


def repo_name(location: str) -> str:
    """The repository name of an npm source (Project.repo)."""
    return f"npm:{location.rpartition('@')[0]}"


def cache_entry(cache: Path, location: str) -> Path:
    """The cache folder of an npm source."""
    return cache / "npm" / slug(location.lstrip("@").replace("/", "-"))


def fetch(source: Source, cache: Path, url: str | None = None, sha256: str | None = None) -> Project:
    """The registry's tarball (npm pack: npm's registry, proxy and TLS settings, its integrity
    check), unpacked; kept only when it ships a test suite miner can run (miner.ecosystems.node)."""
    entry = cache_entry(cache, source.location)
    with locked(entry.with_suffix(".lock")):
        tarball = cached_archive(entry) or _npm_pack(source.location, entry)
        sha = file_sha256(tarball)
        unpacked = entry / f"src-{sha[:12]}"
        if not unpacked.exists():
            unpack_archive(tarball, unpacked)
    root = archive_root(unpacked)
    if problem := suite_problem(root):
        raise FetchError(f"{source.location}: {problem}")
    return Project(source=source, repo=repo_name(source.location), commit=sha, path=root)


def _npm_pack(spec: str, entry: Path) -> Path:
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix=".download-") as tmp:
        try:
            argv = host_command("pack", spec, "--pack-destination", tmp, "--json", "--loglevel=error")
            run = subprocess.run(argv, capture_output=True, text=True, timeout=REGISTRY_TIMEOUT, cwd=tmp)
        except FileNotFoundError:
            raise FetchError("npm is not installed: an npm source needs it") from None
        except subprocess.TimeoutExpired:
            raise FetchError(f"npm pack {spec} timed out after {REGISTRY_TIMEOUT}s") from None
        files = [p for p in Path(tmp).iterdir() if p.name.endswith(".tgz")]
        if run.returncode != 0 or len(files) != 1:
            errors = [line for line in run.stderr.splitlines() if "npm error" in line or "ERR" in line]
            raise FetchError(f"npm pack {spec} failed: {' '.join(errors[:3]) or run.stderr.strip()[-300:]}")
        tarball = entry / files[0].name
        files[0].rename(tarball)
    return tarball


REGISTRY_HOST = "registry.npmjs.org"  # npm's default registry, which serves its tarballs too
_TARBALL_FETCH = """\
(cd "$D" && npm pack {pin} --silent >/dev/null)
tar --no-same-owner -xzf "$D"/*.tgz -C "$D"
"""


def published(location: str) -> Published:
    """The registry's tarball of NAME@VERSION (an npm source's files are that tarball's)."""
    return Published(label=location, holds="its registry tarball", fetch=_TARBALL_FETCH.format(pin=shlex.quote(location)).strip())


def registry_hosts(env: dict[str, str]) -> list[str]:
    """The host npm reaches: the registry npm_config_registry names, else npm's default."""
    named = urlsplit(env.get("npm_config_registry") or env.get("NPM_CONFIG_REGISTRY") or "").hostname
    return [named or REGISTRY_HOST]


SOURCE = RegistrySource(prefix="npm", parse=parse, name=repo_name, entry=cache_entry, fetch=fetch,
                        published=published, hosts=registry_hosts)
