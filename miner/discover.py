"""Discovery: find projects miner can mine, on a registry or GitHub, and write a repos file `miner crawl` takes as is.

    miner discover --pypi names.txt [--from 100 --to 200] [--version SPEC] [--out FILE]
    miner discover --npm names.txt     # NAME or NAME@RANGE a line: npm packages whose tarball ships its tests
    miner discover --github QUERY [--language python --min-stars 50 --pushed-since 2025-01-01] [--dockerized]

What makes a project minable is its ecosystem's to say (miner.ecosystems.DISCOVERIES: a registry's
names and checks; `judge_tree` for a repository's file tree). A registry's names are pinned to a
version and fetched into the store's source cache (so a later crawl reuses them) and judged there.
GitHub repositories come from the search API (PyGithub) and are judged on their tree, pinned to
their default branch's commit (`URL@SHA`); rate limits are waited out and the run resumes.

Every checked project becomes a `Record` (name, kept, reason, line). Records are appended to a
state file next to the output (OUT.state.jsonl), so a discovery interrupted and run again skips
what it checked (with the same criteria); the output is rewritten after each project. A
project that could not be checked for a passing reason (network) is not recorded as checked.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from miner import ecosystems
from miner.ecosystems import Criteria, NameEntry, Unchecked

GITHUB_URL = "https://api.github.com"
HTTP_TIMEOUT = 60  # GitHub API calls

__all__ = ["Candidate", "DiscoverError", "Discovery", "NameEntry", "Options", "Record", "Unchecked"]


class DiscoverError(Exception):
    """Bad input to a discovery (a missing names file, a bad range, a rejected search query)."""


@dataclass
class Record:
    """The verdict on one project: kept (with its repos line) or left out, and why."""

    key: str  # identity across runs: pypi:NAME[SPEC] or github:HOST/OWNER/NAME
    name: str
    kept: bool
    reason: str
    line: str = ""  # the repos.txt line of a kept project
    criteria: str = ""  # the options the verdict depends on; another value means check again
    resumed: bool = False  # read from the state file instead of checked in this run

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "kept": self.kept, "reason": self.reason, "line": self.line,
                "resumed": self.resumed}


@dataclass
class Options(Criteria):
    """The criteria a project is judged by (ecosystems.Criteria: --allow-compiled, --dockerized) and
    when to stop."""

    limit: int | None = None  # stop after this many kept projects

    def criteria(self, *extra: str) -> str:
        return ";".join([f"compiled={int(self.allow_compiled)}", f"docker={int(self.dockerized)}", *extra])


@dataclass
class Candidate:
    """One project to check: its key and name, and how to check it."""

    key: str
    name: str
    check: Callable[[], tuple[bool, str, str]]  # -> (kept, reason, line); may raise Unchecked
    criteria: str = ""


@dataclass
class Discovery:
    """What a run found, in the order the projects were met."""

    records: list[Record] = field(default_factory=list)
    out: Path | None = None

    @property
    def kept(self) -> list[Record]:
        return [r for r in self.records if r.kept]


# -- the state file and the repos file --------------------------------------------------------


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".state.jsonl")


class Ledger:
    """The records checked so far (OUT.state.jsonl, one JSON object a line, appended)."""

    def __init__(self, out: Path) -> None:
        self.path = state_path(out)
        self.records: dict[str, Record] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    data = json.loads(line)
                    record = Record(**{k: v for k, v in data.items() if k in Record.__dataclass_fields__})
                except (ValueError, TypeError):
                    continue  # a line cut by an interruption
                self.records[record.key] = record

    def get(self, key: str, criteria: str) -> Record | None:
        record = self.records.get(key)
        return record if record is not None and record.criteria == criteria else None

    def add(self, record: Record) -> None:
        self.records[record.key] = record
        data = {k: v for k, v in asdict(record).items() if k != "resumed"}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(data) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def write_repos(out: Path, header: str, records: list[Record]) -> None:
    """Rewrite the repos file atomically: kept lines (with their evidence), then the left out as comments."""
    kept = [r for r in records if r.kept]
    left = [r for r in records if not r.kept]
    lines = [f"# {header}: {len(kept)} kept of {len(records)} checked "
             f"({datetime.now(timezone.utc).strftime('%Y-%m-%d')}).",
             "# `miner crawl --repos` takes this file as it is; the state of the discovery is in "
             f"{state_path(out).name}.", ""]
    lines += [f"{r.line}  # {_one_line(r.reason)}" for r in kept]
    if left:
        lines += ["", "# Left out:"] + [f"#   {r.name}: {_one_line(r.reason)}" for r in left]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run(candidates: Iterable[Candidate], out: Path, header: str, options: Options,
        say: Callable[[str], None], total: int | None = None) -> Discovery:
    """Check each candidate (or take its verdict from the state file), rewriting `out` as it goes."""
    ledger, found = Ledger(out), Discovery(out=out)
    for number, candidate in enumerate(candidates, 1):
        if options.limit is not None and len(found.kept) >= options.limit:
            break
        counter = f"[{number}/{total}]" if total else f"[{number}]"
        record = ledger.get(candidate.key, candidate.criteria)
        if record is not None:
            record.resumed = True
        else:
            try:
                kept, reason, line = candidate.check()
            except Unchecked as exc:
                found.records.append(Record(candidate.key, candidate.name, False, f"not checked: {exc}"))
                say(f"{counter} {candidate.name}: not checked, retried on the next run ({exc})")
                continue
            record = Record(candidate.key, candidate.name, kept, reason, line, candidate.criteria)
            ledger.add(record)
        found.records.append(record)
        verdict = f"kept {record.line}" if record.kept else "left out"
        say(f"{counter} {candidate.name}: {verdict}: {record.reason}" + (" (checked before)" if record.resumed else ""))
        write_repos(out, header, found.records)
    write_repos(out, header, found.records)
    return found


# -- a registry's names file ------------------------------------------------------------------


def read_names(path: Path, start: int | None = None, end: int | None = None,
               parse: Callable[[str], NameEntry] | None = None) -> list[NameEntry]:
    """The entries of a names file (one a line, `#` comments), positions start..end (1-based,
    inclusive), each read by `parse` (a PyPI requirement by default)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DiscoverError(f"cannot read the names file {path}: {exc}") from None
    parse = parse or ecosystems.DISCOVERIES["pypi"].entry
    entries = [parse(text) for line in lines if (text := line.split("#", 1)[0].strip())]
    if start is not None and end is not None and end < start:
        raise DiscoverError(f"--to {end} is before --from {start}")
    if start is not None and start > len(entries):
        raise DiscoverError(f"--from {start} is past the end of {path} ({len(entries)} names)")
    return entries[(start or 1) - 1:end]


def registry_candidates(registry: str, entries: list[NameEntry], cache: Path, options: Options,
                        version: str | None = None, index: str | None = None) -> Iterator[Candidate]:
    """Candidates for the names of a names file; `version` is the spec of entries that have none."""
    found = ecosystems.DISCOVERIES[registry]
    for entry in entries:
        if version and entry.name and not entry.spec:
            entry = NameEntry(entry.text, entry.name, version)
        yield Candidate(found.key(entry), entry.name or entry.text,
                        lambda e=entry: found.check(e, cache, options, index), options.criteria(found.criteria()))


def discover_names(registry: str, names: Path, out: Path, cache: Path, options: Options, say: Callable[[str], None],
                   start: int | None = None, end: int | None = None, version: str | None = None,
                   index: str | None = None) -> Discovery:
    """Check the names of a names file (positions start..end) of a registry ("pypi", "npm": a key
    of ecosystems.DISCOVERIES) and write the repos file `out`."""
    found = ecosystems.DISCOVERIES[registry]
    if version and (problem := found.spec_problem(version)):
        raise DiscoverError(problem)
    entries = read_names(names, start, end, found.entry)
    header = f"miner discover --{registry} {names}" + (f" (names {start or 1}..{end or 'end'})" if start or end else "")
    return run(registry_candidates(registry, entries, cache, options, version, index), out, header, options, say,
               len(entries))


# -- GitHub -----------------------------------------------------------------------------------


def github_query(query: str, language: str | None = None, min_stars: int | None = None,
                 pushed_since: str | None = None) -> str:
    """The search query with the conveniences added as qualifiers (the query's own ones win)."""
    parts = [query.strip()] if query.strip() else []
    if language and "language:" not in query:
        parts.append(f"language:{language}")
    if min_stars is not None and "stars:" not in query:
        parts.append(f"stars:>={min_stars}")
    if pushed_since and "pushed:" not in query:
        parts.append(f"pushed:>={pushed_since}")
    if not parts:
        raise DiscoverError("the GitHub search query is empty (give a query or --language/--min-stars/--pushed-since)")
    return " ".join(parts)


def github_client(base_url: str = GITHUB_URL, token: str | None = None, per_page: int = 100) -> Any:
    """A PyGithub client: rate limits are left to `rate_limited` (which waits and says so);
    server errors and dropped connections are retried with a backoff."""
    from github import Auth, Github
    from urllib3.util.retry import Retry

    retry = Retry(total=5, backoff_factor=2, status_forcelist=(500, 502, 503, 504), allowed_methods=None,
                  raise_on_status=False)
    auth = Auth.Token(token) if token else None
    return Github(auth=auth, base_url=base_url.rstrip("/"), per_page=per_page, retry=retry,
                  seconds_between_requests=None, timeout=HTTP_TIMEOUT)


def github_token() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


def reset_wait(headers: dict[str, str] | None, now: float | None = None) -> float:
    """Seconds to wait after a rate-limit answer: Retry-After, else until X-RateLimit-Reset (plus 1 s)."""
    lower = {k.lower(): v for k, v in (headers or {}).items()}
    now = time.time() if now is None else now
    if str(lower.get("retry-after", "")).isdigit():
        return max(1.0, float(lower["retry-after"]))
    if str(lower.get("x-ratelimit-reset", "")).isdigit():
        return min(3600.0, max(1.0, float(lower["x-ratelimit-reset"]) - now + 1))
    return 60.0  # a secondary limit without a hint: GitHub asks for "a few minutes" at most


def rate_limited(call: Callable[[], Any], say: Callable[[str], None]) -> Any:
    """call(), waiting out every rate-limit answer until the reset time the API gives, then again."""
    from github import RateLimitExceededException

    while True:
        try:
            return call()
        except RateLimitExceededException as exc:
            wait = reset_wait(exc.headers)
            say(f"GitHub rate limit reached: waiting {wait:.0f}s for the reset, then resuming")
            time.sleep(wait)


def search(client: Any, query: str, say: Callable[[str], None]) -> Iterator[Any]:
    """The repositories a search finds, page after page (following the Link headers); a rate-limit
    answer in the middle is waited out and the listing resumes where it stopped."""
    from github import GithubException, RateLimitExceededException

    results = client.search_repositories(query)
    done = 0
    while True:
        try:
            for index, repo in enumerate(results):  # a new pass replays the pages already read
                if index >= done:
                    done += 1
                    yield repo
            return
        except RateLimitExceededException as exc:
            wait = reset_wait(exc.headers)
            say(f"GitHub rate limit reached: waiting {wait:.0f}s for the reset, then resuming")
            time.sleep(wait)
        except GithubException as exc:
            if done:  # a later page failed: keep what was found
                say(f"GitHub search stopped after {done} results: {_github_message(exc)}")
                return
            raise DiscoverError(f"GitHub search for {query!r} failed: {_github_message(exc)}") from None


def _github_message(exc: Any) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    return f"{exc.status} {data.get('message') or exc.data or ''}".strip()


def check_github(repo: Any, options: Options, say: Callable[[str], None]) -> tuple[bool, str, str]:
    """Judge one repository by its tree at the default branch's commit."""
    from github import GithubException, UnknownObjectException

    try:
        sha = rate_limited(lambda: repo.get_branch(repo.default_branch).commit.sha, say)
        tree = rate_limited(lambda: repo.get_git_tree(sha, recursive=True), say)
    except UnknownObjectException:
        return False, "empty repository (its default branch has no commit)", ""
    except GithubException as exc:
        if exc.status in (409, 451, 403):
            return False, f"GitHub refused the repository: {_github_message(exc)}", ""
        raise Unchecked(f"GitHub answered {_github_message(exc)}") from None
    paths = [element.path for element in tree.tree if element.type == "blob"]
    kept, reason = ecosystems.judge_tree(paths, options)
    if tree.raw_data.get("truncated") and not kept:
        reason += " (the tree is too large for one listing: judged on its first part)"
    return kept, reason, f"{repo.clone_url}@{sha}"


def github_candidates(client: Any, query: str, options: Options, say: Callable[[str], None],
                      host: str) -> Iterator[Candidate]:
    for repo in search(client, query, say):
        yield Candidate(f"github:{host}/{repo.full_name}", repo.full_name,
                        lambda r=repo: check_github(r, options, say), options.criteria())


def discover_github(query: str, out: Path, options: Options, say: Callable[[str], None],
                    base_url: str = GITHUB_URL, token: str | None = None) -> Discovery:
    """Search GitHub (or a GitHub Enterprise API at base_url) and write the repos file `out`."""
    client = github_client(base_url, token)
    host = urllib.parse.urlsplit(base_url).netloc or base_url
    header = f"miner discover --github {query!r}"
    return run(github_candidates(client, query, options, say, host), out, header, options, say)
