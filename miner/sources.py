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

import hashlib
import os
import re
import shlex
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import git

from miner import ecosystems
from miner.archives import FetchError, extract_tar, file_sha256, locked, publish, slug
from miner.models import Project, Source, SourceError
from miner.projectfiles import skipped_dir

OVERRIDE_KEYS = frozenset({"test", "extras", "python", "install", "timeout", "tox_env"})
ENV_OVERRIDE_PREFIX = "env."
GIT_SCHEMES = ("https://", "http://", "ssh://", "file://", "git://")

_SCP_LIKE = re.compile(r"^(?P<user>[A-Za-z0-9._-]+)@(?P<host>[A-Za-z0-9.-]+):(?P<path>(?!//).+)$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXTRA_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_PYTHON_VERSION = re.compile(r"^3\.\d+(\.\d+)?$")
_HEX_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")


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
    for prefix, registry in ecosystems.SOURCES.items():
        if spec.startswith(f"{prefix}:"):
            return prefix, registry.parse(spec.removeprefix(f"{prefix}:")), None
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
    if registry := ecosystems.SOURCES.get(source.kind):
        return source.kind, registry.identity(source.location), None
    if source.kind == "git":
        return "git", _normalise_url(source.location), source.ref
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
    if registry := ecosystems.SOURCES.get(source.kind):
        return registry.name(source.location)
    return source.location if source.kind == "git" else str(Path(source.location))


def fetch(source: Source, cache: Path, *, sdist_url: str | None = None, sdist_sha256: str | None = None) -> Project:
    """Fetch a source into the cache and pin it; raise FetchError with a reason on failure.

    For a pypi source, `sdist_url` (with its `sdist_sha256`, from the index's JSON API) is
    downloaded directly instead of through `pip download`, which also prepares metadata.
    A registry's source (pypi:, npm:) is its ecosystem's to fetch (miner.ecosystems.SOURCES).
    """
    cache = Path(cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    if source.kind == "git":
        return _fetch_git(source, cache)
    if source.kind == "local":
        return _fetch_local(source, cache)
    if registry := ecosystems.SOURCES.get(source.kind):
        return registry.fetch(source, cache, sdist_url, sdist_sha256)
    raise FetchError(f"unknown source kind {source.kind!r}")


def cache_entry(source: Source, cache: Path) -> Path:
    """The cache folder `fetch` uses for a source (its lock file is the entry with suffix .lock)."""
    cache = Path(cache).resolve()
    if source.kind == "git":
        digest = hashlib.sha256(_normalise_url(source.location).encode()).hexdigest()[:12]
        return cache / "git" / f"{slug(source.name)}-{digest}"
    if source.kind == "local":
        return cache / "local" / f"{slug(source.name)}-{hashlib.sha256(source.location.encode()).hexdigest()[:12]}"
    return ecosystems.SOURCES[source.kind].entry(cache, source.location)


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
    with locked(entry.with_suffix(".lock")):
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
            extract_tar(tar, tmp, strict=False)
    publish(tmp, checkout)


# --- local folders


def _fetch_local(source: Source, cache: Path) -> Project:
    folder = Path(source.location)
    if not folder.is_dir():
        raise FetchError(f"folder not found: {folder}")
    entry = cache_entry(source, cache)
    entry.mkdir(parents=True, exist_ok=True)
    with locked(entry.with_suffix(".lock")):
        tmp = Path(tempfile.mkdtemp(prefix=".copy-", dir=entry))
        try:
            _copy_project(folder, tmp)
            digest = tree_hash(tmp)
            commit = _folder_commit(folder, digest)
            checkout = entry / commit
            publish(tmp, checkout)
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
            digest.update(f"F {rel} {int(executable)} {file_sha256(path)}\n".encode())
        elif path.is_dir():
            digest.update(f"D {rel}\n".encode())
    return digest.hexdigest()


