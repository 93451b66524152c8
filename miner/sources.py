"""Sources: parse repos.txt and fetch each source into a pinned, clean folder.

A repos file holds one source a line:

    https://github.com/owner/name@v1.2      # git URL, optional @ref (branch, tag or commit)
    git@github.com:owner/name.git@main      # scp-like git address (its first @ is not a ref)
    ./projects/local-app                    # a folder, relative to the repos file's folder
    pypi:iniconfig==2.0.0                   # an sdist from the package index, exact pin
    pypi:attrs==23.2.0  test="pytest -x tests"  env.TZ=UTC   # key=value overrides

`parse_repos` turns the file into `Source` records (and `SourceError`s for bad lines, which never
stop the other lines); `fetch` turns a `Source` into a `Project`: a folder in the cache holding the
project's files at one resolved revision, without `.git`, that later stages only read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import git
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from miner.ecosystems.node import npm
from miner.ecosystems.node.runner import suite_problem as node_suite_problem
from miner.ecosystems.python.install import pip_errors
from miner.models import Project, Source, SourceError
from miner.projectfiles import skipped_dir

OVERRIDE_KEYS = frozenset({"test", "extras", "python", "install", "timeout", "tox_env"})
ENV_OVERRIDE_PREFIX = "env."
GIT_SCHEMES = ("https://", "http://", "ssh://", "file://", "git://")
SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
PIP_TIMEOUT = 900
DOWNLOAD_TIMEOUT = 120  # seconds without data before an sdist download gives up
PYPI_URL = "https://pypi.org/pypi"  # the index's JSON API
HTTP_TIMEOUT = 60

_SCP_LIKE = re.compile(r"^(?P<user>[A-Za-z0-9._-]+)@(?P<host>[A-Za-z0-9.-]+):(?P<path>(?!//).+)$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXTRA_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_PYTHON_VERSION = re.compile(r"^3\.\d+(\.\d+)?$")
NPM_NAME = re.compile(r"^(@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_HEX_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")


class FetchError(Exception):
    """A source could not be fetched; `reason` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_repos(path: Path) -> tuple[list[Source], list[SourceError]]:
    """Parse a repos file; bad or duplicate lines become errors and the rest still parse."""
    path = Path(path)
    sources: list[Source] = []
    errors: list[SourceError] = []
    seen: dict[tuple[str, str, str | None], str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        origin = f"{path}:{number}"
        try:
            source = parse_source(line, base=path.parent, origin=origin)
        except ValueError as exc:
            errors.append(SourceError(origin=origin, line=line, reason=str(exc)))
            continue
        if source is None:
            continue
        key = _identity(source)
        if key in seen:
            errors.append(SourceError(origin=origin, line=line, reason=f"duplicate of {seen[key]}"))
            continue
        seen[key] = origin
        sources.append(source)
    return sources, errors


def parse_source(line: str, base: Path, origin: str = "") -> Source | None:
    """Parse one repos line (None for blank or comment lines); raise ValueError with a reason."""
    text = _strip_comment(line).strip()
    if not text:
        return None
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split line: {exc}") from None
    spec, *pairs = tokens
    overrides = _parse_overrides(pairs)
    kind, location, ref = _parse_spec(spec, base)
    return Source(raw=line.strip(), kind=kind, location=location, ref=ref,
                  overrides=overrides, origin=origin)


def _strip_comment(line: str) -> str:
    """Cut a `#` comment that starts the line or follows whitespace, outside quotes.

    A `#` inside a word (a URL fragment, `pkg#egg`) is kept.
    """
    quote: str | None = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value after the source, got {pair!r}")
        if key in overrides:
            raise ValueError(f"override {key!r} given twice")
        _check_override(key, value)
        overrides[key] = value
    return overrides


def _check_override(key: str, value: str) -> None:
    if key.startswith(ENV_OVERRIDE_PREFIX):
        name = key.removeprefix(ENV_OVERRIDE_PREFIX)
        if not _ENV_NAME.match(name):
            raise ValueError(f"bad environment variable name in {key!r}")
        return  # an empty value is allowed: it sets the variable to ""
    if key not in OVERRIDE_KEYS:
        known = ", ".join(sorted(OVERRIDE_KEYS)) + ", env.NAME"
        raise ValueError(f"unknown override {key!r} (known: {known})")
    if not value.strip() and key != "tox_env":  # tox_env= (empty): no tox environment
        raise ValueError(f"override {key!r} has an empty value")
    if key == "timeout":
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"timeout must be a number of seconds, got {value!r}") from None
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, got {value!r}")
    elif key == "python" and not _PYTHON_VERSION.match(value):
        raise ValueError(f"python must be a version like 3.11, got {value!r}")
    elif key == "extras":
        bad = [name for name in value.split(",") if not _EXTRA_NAME.match(name.strip())]
        if bad:
            raise ValueError(f"bad extra name(s) {bad} in {value!r}")


def _parse_spec(spec: str, base: Path) -> tuple[str, str, str | None]:
    """Return (kind, location, ref) for the source part of a line."""
    if spec.startswith("pypi:"):
        return "pypi", _parse_pypi(spec.removeprefix("pypi:")), None
    if spec.startswith("npm:"):
        return "npm", _parse_npm(spec.removeprefix("npm:")), None
    if spec.lower().startswith(GIT_SCHEMES):
        return ("git", *_parse_url(spec))
    match = _SCP_LIKE.match(spec)
    if match:
        path, ref = _split_ref(match["path"], spec)
        if not path.strip("/"):
            raise ValueError(f"git address {spec!r} has no repository path")
        return "git", f"{match['user']}@{match['host']}:{path}", ref
    if _SCHEME.match(spec) and not (base / spec).exists():
        raise ValueError(f"unknown source form {spec!r} (expected a git URL, a folder or pypi:NAME==VERSION)")
    return "local", _parse_folder(spec, base), None


def _parse_pypi(text: str) -> str:
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


def _parse_npm(text: str) -> str:
    name, sep, version = text.rpartition("@")
    if not sep or not name or not version:
        raise ValueError(f"npm source needs an exact version NAME@VERSION, got 'npm:{text}'")
    if not NPM_NAME.match(name):
        raise ValueError(f"invalid npm package name {name!r}")
    if not _SEMVER.match(version):
        raise ValueError(f"npm source needs an exact version (x.y.z), got {version!r} for {name}")
    return f"{name}@{version}"


def _parse_url(spec: str) -> tuple[str, str | None]:
    scheme, rest = spec.split("://", 1)
    netloc, slash, path = rest.partition("/")
    if scheme.lower() != "file" and not netloc:
        raise ValueError(f"URL {spec!r} has no host")
    path, ref = _split_ref(path, spec)  # an @ in the host part is user info, not a ref
    if not path.strip("/"):
        raise ValueError(f"URL {spec!r} has no repository path")
    return f"{scheme}://{netloc}{slash}{path}", ref


def _split_ref(path: str, spec: str) -> tuple[str, str | None]:
    if "@" not in path:
        return path, None
    path, ref = path.rsplit("@", 1)
    problem = _ref_problem(ref)
    if problem:
        raise ValueError(f"bad ref {ref!r} in {spec!r}: {problem}")
    return path, ref


def _ref_problem(ref: str) -> str | None:
    """Why `ref` is not a valid git ref name (the rules of git check-ref-format), or None."""
    if not ref:
        return "empty ref after @"
    if any(ch.isspace() or ord(ch) < 32 or ch in "~^:?*[\\" for ch in ref):
        return "contains a character git forbids in ref names"
    if ".." in ref or "@{" in ref or "//" in ref:
        return "contains '..', '@{' or '//'"
    if ref.startswith(("/", "-", ".")) or ref.endswith(("/", ".", ".lock")):
        return "starts or ends with a character git forbids"
    return None


def _parse_folder(spec: str, base: Path) -> str:
    folder = (base / Path(spec).expanduser()).resolve()
    if not folder.exists():
        raise ValueError(f"folder not found: {folder}")
    if not folder.is_dir():
        raise ValueError(f"not a folder: {folder}")
    return str(folder)


def _identity(source: Source) -> tuple[str, str, str | None]:
    """What makes two lines the same source (spelling differences collapse)."""
    if source.kind == "pypi":
        name, version = source.location.split("==")
        return "pypi", f"{canonicalize_name(name)}=={Version(version)}", None
    if source.kind == "git":
        return "git", _normalise_url(source.location), source.ref
    if source.kind == "npm":
        return "npm", source.location, None
    return "local", source.location, None


def _normalise_url(url: str) -> str:
    url = url.rstrip("/").removesuffix(".git")
    if "://" in url:
        parts = urlsplit(url)
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}"
    user_host, _, path = url.partition(":")
    return f"{user_host.lower()}:{path}"


# ---------------------------------------------------------------------------------------------
# Fetching


def repo_name(source: Source) -> str:
    """The repository name `fetch` gives the source's project (Project.repo), known before fetching."""
    if source.kind == "pypi":
        return f"pypi:{canonicalize_name(source.location.split('==')[0])}"
    if source.kind == "npm":
        return f"npm:{source.location.rpartition('@')[0]}"
    return source.location if source.kind == "git" else str(Path(source.location))


def fetch(source: Source, cache: Path, *, sdist_url: str | None = None, sdist_sha256: str | None = None) -> Project:
    """Fetch a source into the cache and pin it; raise FetchError with a reason on failure.

    For a pypi source, `sdist_url` (with its `sdist_sha256`, from the index's JSON API) is
    downloaded directly instead of through `pip download`, which also prepares metadata.
    """
    cache = Path(cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    if source.kind == "git":
        return _fetch_git(source, cache)
    if source.kind == "local":
        return _fetch_local(source, cache)
    if source.kind == "pypi":
        return _fetch_pypi(source, cache, sdist_url, sdist_sha256)
    if source.kind == "npm":
        return _fetch_npm(source, cache)
    raise FetchError(f"unknown source kind {source.kind!r}")


def cache_entry(source: Source, cache: Path) -> Path:
    """The cache folder `fetch` uses for a source (its lock file is the entry with suffix .lock)."""
    cache = Path(cache).resolve()
    if source.kind == "git":
        digest = hashlib.sha256(_normalise_url(source.location).encode()).hexdigest()[:12]
        return cache / "git" / f"{_slug(source.name)}-{digest}"
    if source.kind == "local":
        return cache / "local" / f"{_slug(source.name)}-{hashlib.sha256(source.location.encode()).hexdigest()[:12]}"
    if source.kind == "npm":
        return cache / "npm" / _slug(source.location.lstrip("@").replace("/", "-"))
    name, version = source.location.split("==")
    return cache / "pypi" / f"{canonicalize_name(name)}-{version}"


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Serialise work on one cache entry across processes that crawl in parallel."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "project"


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished folder into place, so a half-written folder is never seen as done."""
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.chmod(0o755)  # mkdtemp makes 0700 folders; sandboxes may read as another user
        tmp.rename(final)


# --- git


def _git_env() -> dict[str, str]:
    """Never prompt for credentials, and give up on a stalled transfer."""
    return {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=30",
        "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
        "GIT_HTTP_LOW_SPEED_TIME": "60",
    }


def _git_error(exc: git.GitCommandError) -> str:
    lines = [ln.strip() for ln in str(exc.stderr or "").splitlines() if ln.strip()]
    lines = [ln.removeprefix("stderr: ").strip("'").strip() for ln in lines]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return "; ".join(fatal or [ln for ln in lines if ln])[-400:] or str(exc)


def _fetch_git(source: Source, cache: Path) -> Project:
    url = source.location
    entry = cache_entry(source, cache)
    with _locked(entry.with_suffix(".lock")):
        repo = _clone_or_update(url, entry / "repo.git", source.ref)
        sha = _resolve(repo, url, source.ref)
        checkout = entry / "checkouts" / sha
        if not checkout.exists():
            _export(repo, sha, checkout)
    return Project(source=source, repo=repo_name(source), commit=sha, path=checkout)


def _clone_or_update(url: str, bare: Path, ref: str | None) -> git.Repo:
    env = _git_env()
    if not bare.exists():
        tmp = bare.with_name(bare.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            git.Repo.clone_from(url, tmp, bare=True, env=env)
        except git.GitCommandError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FetchError(f"cannot clone {url}: {_git_error(exc)}") from None
        tmp.rename(bare)
        return git.Repo(bare)
    repo = git.Repo(bare)
    if ref and _HEX_SHA.match(ref) and (_rev_parse(repo, ref) or "").startswith(ref.lower()):
        return repo  # a commit already cached never changes: no need to reach the remote
    try:
        with repo.git.custom_environment(**env):
            repo.git.fetch("--prune", "--force", "origin",
                           "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
            if ref is None:
                _follow_remote_head(repo)
    except git.GitCommandError as exc:
        raise FetchError(f"cannot fetch {url}: {_git_error(exc)}") from None
    return repo


def _follow_remote_head(repo: git.Repo) -> None:
    """Point the cached clone's HEAD at the remote's current default branch."""
    for line in repo.git.ls_remote("--symref", "origin", "HEAD").splitlines():
        if line.startswith("ref: refs/heads/") and line.endswith("\tHEAD"):
            repo.git.symbolic_ref("HEAD", line.removeprefix("ref: ").split("\t")[0])
            return


def _rev_parse(repo: git.Repo, ref: str) -> str | None:
    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except git.GitCommandError:
        return None


def _resolve(repo: git.Repo, url: str, ref: str | None) -> str:
    if ref is None:
        sha = _rev_parse(repo, "HEAD")
        if not sha:
            raise FetchError(f"{url} has no commits on its default branch")
        return sha
    # A branch or tag name wins over an abbreviated sha that happens to look like one.
    for candidate in (f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
        sha = _rev_parse(repo, candidate)
        if sha:
            return sha
    if _HEX_SHA.match(ref):
        sha = _fetch_commit(repo, ref)
        if sha:
            return sha
    raise FetchError(f"ref {ref!r} not found in {url} (no such branch, tag or commit)")


def _fetch_commit(repo: git.Repo, sha: str) -> str | None:
    """Ask the remote for one commit that no branch or tag reaches (servers may refuse)."""
    try:
        with repo.git.custom_environment(**_git_env()):
            repo.git.fetch("origin", sha)
    except git.GitCommandError:
        return None
    return _rev_parse(repo, sha)


def _export(repo: git.Repo, sha: str, checkout: Path) -> None:
    """Write the tree of `sha` (no .git) into `checkout` with `git archive`."""
    checkout.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=checkout.parent))
    with tempfile.TemporaryFile() as archive:
        repo.archive(archive, treeish=sha, format="tar")
        archive.seek(0)
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            _extract_tar(tar, tmp, strict=False)
    _publish(tmp, checkout)


# --- local folders


def _fetch_local(source: Source, cache: Path) -> Project:
    folder = Path(source.location)
    if not folder.is_dir():
        raise FetchError(f"folder not found: {folder}")
    entry = cache_entry(source, cache)
    entry.mkdir(parents=True, exist_ok=True)
    with _locked(entry.with_suffix(".lock")):
        tmp = Path(tempfile.mkdtemp(prefix=".copy-", dir=entry))
        try:
            _copy_project(folder, tmp)
            digest = tree_hash(tmp)
            commit = _folder_commit(folder, digest)
            checkout = entry / commit
            _publish(tmp, checkout)
        except (OSError, shutil.Error) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FetchError(f"cannot copy {folder}: {exc}") from None
    return Project(source=source, repo=repo_name(source), commit=commit, path=checkout)


def _folder_commit(folder: Path, digest: str) -> str:
    """HEAD (plus a content hash when dirty) for a git work tree root, else the content hash."""
    if not (folder / ".git").exists():  # a folder inside a bigger repo is hashed by content
        return digest
    try:
        repo = git.Repo(folder)
        head = repo.head.commit.hexsha
        dirty = repo.is_dirty(untracked_files=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError, git.GitCommandError):
        return digest  # not a usable repo, or no commit yet
    return f"{head}-dirty-{digest[:12]}" if dirty else head


def _skip(root: Path, directory: Path, names: list[str]) -> set[str]:
    """Folders of a local project that hold no project files (miner.projectfiles decides)."""
    return {name for name in names if (directory / name).is_dir() and not (directory / name).is_symlink()
            and skipped_dir(name, directory / name, top=directory == root)}


def _copy_project(folder: Path, dest: Path) -> None:
    shutil.copytree(folder, dest, symlinks=True, dirs_exist_ok=True,
                    ignore=lambda d, names: _skip(folder, Path(d), names))


def tree_hash(root: Path) -> str:
    """A sha256 over the relative paths, exec bits, contents and symlink targets under root."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} -> {os.readlink(path)}\n".encode())
        elif path.is_file():
            executable = bool(path.stat().st_mode & stat.S_IXUSR)
            digest.update(f"F {rel} {int(executable)} {_file_sha256(path)}\n".encode())
        elif path.is_dir():
            digest.update(f"D {rel}\n".encode())
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- pypi sdists


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


def _fetch_pypi(source: Source, cache: Path, url: str | None = None, sha256: str | None = None) -> Project:
    name, version = source.location.split("==")
    entry = cache_entry(source, cache)
    with _locked(entry.with_suffix(".lock")):
        sdist = _cached_sdist(entry)
        if sdist is None and url is None:
            # The file straight from the index: `pip download` would also build the sdist's
            # metadata, and so fail on build dependencies it cannot install (the build stage
            # reports those). pip stays the fallback for indexes without a JSON API.
            found = index_sdist(name, version) or {}
            url, sha256 = found.get("url"), (found.get("digests") or {}).get("sha256")
        sdist = sdist or (_download_url(url, sha256, entry) if url else _download_sdist(name, version, entry))
        sha = _file_sha256(sdist)
        unpacked = entry / f"src-{sha[:12]}"
        if not unpacked.exists():
            unpack_archive(sdist, unpacked)
    return Project(source=source, repo=repo_name(source), commit=sha, path=_sdist_root(unpacked))


def _fetch_npm(source: Source, cache: Path) -> Project:
    """The registry's tarball (npm pack: npm's registry, proxy and TLS settings, its integrity
    check), unpacked; kept only when it ships a test suite miner can run (miner.ecosystems.node)."""
    entry = cache_entry(source, cache)
    with _locked(entry.with_suffix(".lock")):
        tarball = _cached_sdist(entry) or _npm_pack(source.location, entry)
        sha = _file_sha256(tarball)
        unpacked = entry / f"src-{sha[:12]}"
        if not unpacked.exists():
            unpack_archive(tarball, unpacked)
    root = _sdist_root(unpacked)
    if problem := node_suite_problem(root):
        raise FetchError(f"{source.location}: {problem}")
    return Project(source=source, repo=repo_name(source), commit=sha, path=root)


def _npm_pack(spec: str, entry: Path) -> Path:
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix=".download-") as tmp:
        try:
            argv = npm.host_command("pack", spec, "--pack-destination", tmp, "--json", "--loglevel=error")
            run = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT, cwd=tmp)
        except FileNotFoundError:
            raise FetchError("npm is not installed: an npm source needs it") from None
        except subprocess.TimeoutExpired:
            raise FetchError(f"npm pack {spec} timed out after {PIP_TIMEOUT}s") from None
        files = [p for p in Path(tmp).iterdir() if p.name.endswith(".tgz")]
        if run.returncode != 0 or len(files) != 1:
            errors = [line for line in run.stderr.splitlines() if "npm error" in line or "ERR" in line]
            raise FetchError(f"npm pack {spec} failed: {' '.join(errors[:3]) or run.stderr.strip()[-300:]}")
        tarball = entry / files[0].name
        files[0].rename(tarball)
    return tarball


def _cached_sdist(entry: Path) -> Path | None:
    found = [p for p in entry.glob("*") if p.is_file() and p.name.endswith(SDIST_SUFFIXES)]
    return found[0] if len(found) == 1 else None


def _download_sdist(name: str, version: str, entry: Path) -> Path:
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix=".download-") as tmp:
        # --no-binary NAME, not :all:, so build dependencies may still come as wheels.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
               f"{name}=={version}", "-d", tmp, "--disable-pip-version-check", "--no-input"]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download of {name}=={version} timed out after {PIP_TIMEOUT}s") from None
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


def unpack_archive(sdist: Path, dest: Path) -> None:
    """Unpack a .tar.* or .zip archive into the new folder dest, refusing unsafe members."""
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        if sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as archive:
                _extract_zip(archive, tmp)
        else:
            with tarfile.open(sdist) as archive:
                _extract_tar(archive, tmp, strict=True)
    except (tarfile.TarError, zipfile.BadZipFile, OSError, FetchError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = exc.reason if isinstance(exc, FetchError) else str(exc)
        raise FetchError(f"cannot unpack {sdist.name}: {reason}") from None
    _publish(tmp, dest)


def _sdist_root(unpacked: Path) -> Path:
    """The sdist's single top folder (NAME-VERSION/), or the unpack folder itself."""
    entries = list(unpacked.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return unpacked


def _extract_tar(archive: tarfile.TarFile, dest: Path, strict: bool) -> None:
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
