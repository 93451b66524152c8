"""Procedural inverter: applies catalogue types to enumerated targets, no model needed.

What could break is enumerated elsewhere (miner.inverters.targets, the one enumeration the crawl
and `miner graph` share, ranked by miner.graph); this module decides how to break each target:

    targets = enumerate_targets(project, healthy)          # what could break (inverters.targets)
    inverter = ProceduralInverter(select_types(load_catalogue(), None), seed=0)
    inversions = inverter.candidates(project, healthy, targets=targets, budget=20)

Here: matching types to targets (`matches`), the context providers that compute a type's
template variables (an older release on the index, a config key to drop or retype with the
format's real parser and a line-preserving edit, a wrong value for a variable), and the order.
Config keys the code names in a string are preferred (from the tree-sitter parse,
`targets.code_facts`).

A type applies to a target when the kinds agree, the healthy backend is among its backends and
its preconditions hold against Target.attrs (see inversions/README.md):
    {attr: value}       attrs[attr] == value
    {attr: [a, b]}      attrs[attr] in [a, b]
    {min_attr: n}       attrs[attr] >= n        (max_attr: <=)
    {context: [name]}   the named context providers below must succeed (else the pair is skipped)

Order: for a given seed the list is deterministic. Without explicit targets (or with
shuffle=True), each family's (target, type) pairs are shuffled, weighted by the type's weight;
with targets given, their order is kept. Families are then interleaved round-robin, so a
small budget spreads over them.
"""

from __future__ import annotations

import base64
import configparser
import copy
import io
import json
import random
import re
import stat
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from miner.catalogue import CatalogueError, render
from miner.inverters.targets import CodeFacts, code_facts, enumerate_targets, parse_config
from miner.models import HealthyState, Inversion, InversionType, Project, Target

BOOL_WORDS = {"true", "false", "yes", "no", "on", "off"}
FLIPS = {"true": "false", "false": "true", "1": "0", "0": "1", "yes": "no", "no": "yes", "on": "off", "off": "on"}


def b64_lines(data: bytes) -> str:
    """Base64 wrapped at 76 columns, for heredocs in scripts."""
    return base64.encodebytes(data).decode().rstrip("\n")


# ---------------------------------------------------------------- config files


def leaf_keys(fmt: str, data: Any) -> list[tuple[tuple[str, ...], Any]]:
    """(path, value) of scalar/list keys at depth 1 or 2 of a parsed config (ini: section.option)."""
    keys: list[tuple[tuple[str, ...], Any]] = []
    if not isinstance(data, dict):
        return keys
    for key, value in data.items():
        if not isinstance(key, str):
            continue
        if isinstance(value, dict):
            keys += [((key, k2), v2) for k2, v2 in value.items() if isinstance(k2, str) and not isinstance(v2, dict)]
        elif fmt != "ini":
            keys.append(((key,), value))
    return [(p, v) for p, v in keys if p[0] != "DEFAULT"]


def _set_path(data: Any, path: tuple[str, ...], value: Any = None, delete: bool = False) -> Any:
    result = copy.deepcopy(data)
    node = result
    for part in path[:-1]:
        node = node[part]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return result


_INI_SECTION = re.compile(r"^\s*\[(?P<name>[^\]]+)\]\s*$")
_INI_OPTION = re.compile(r"^(?P<key>[^\s=:;#][^=:]*?)\s*[=:]")
_TOML_TABLE = re.compile(r"^\s*\[(?P<name>[^\[\]]+)\]\s*(#.*)?$")
_TOML_KEY = re.compile(r"^\s*(?P<key>\"[^\"]+\"|'[^']+'|[A-Za-z0-9_-]+)\s*=")
_YAML_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>\"[^\"]+\"|'[^']+'|[^\s#'\"\-][^:#]*?):(\s|$)")


def _unquote(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'" else key


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """End (exclusive) of the block opened at `start`: the lines indented deeper than `indent`."""
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # leave trailing blank lines in place
    return end


def _locate_ini(lines: list[str], path: tuple[str, ...]) -> tuple[int, int] | None:
    section = None
    for i, line in enumerate(lines):
        header = _INI_SECTION.match(line)
        if header:
            section = header.group("name").strip()
            continue
        option = _INI_OPTION.match(line)
        if option and section == path[0] and option.group("key").strip().lower() == path[1].lower():
            return i, _block_end(lines, i, 0)
    return None


def _locate_toml(lines: list[str], path: tuple[str, ...]) -> tuple[int, int] | None:
    table: str | None = ""
    want_table = path[0] if len(path) == 2 else ""
    for i, line in enumerate(lines):
        header = _TOML_TABLE.match(line)
        if header:
            table = header.group("name").strip()
            continue
        if line.lstrip().startswith("[["):
            table = None  # arrays of tables are never edited
            continue
        key = _TOML_KEY.match(line)
        if key and table == want_table and _unquote(key.group("key")) == path[-1]:
            return i, i + 1
    return None


def _locate_yaml(lines: list[str], path: tuple[str, ...]) -> tuple[int, int] | None:
    lo, hi, indent = 0, len(lines), 0
    for depth, part in enumerate(path):
        for i in range(lo, hi):
            match = _YAML_KEY.match(lines[i])
            if not match or _unquote(match.group("key").strip()) != part:
                continue
            if depth == 0 and match.group("indent"):
                continue
            if depth > 0 and (not match.group("indent") or _indent(lines[i]) != indent):
                continue
            lo, hi = i, _block_end(lines, i, _indent(lines[i]))
            break
        else:
            return None
        if depth + 1 < len(path):
            children = [j for j in range(lo + 1, hi) if lines[j].strip() and not lines[j].lstrip().startswith("#")]
            if not children:
                return None
            indent = _indent(lines[children[0]])
            lo += 1
    return lo, hi


LOCATORS = {"ini": _locate_ini, "toml": _locate_toml, "yaml": _locate_yaml}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML rendering for {type(value).__name__}")


def _render_value(fmt: str, value: Any) -> str:
    if fmt == "toml":
        return _toml_value(value)
    if fmt == "ini":
        return str(value)
    return json.dumps(value, ensure_ascii=False)  # JSON flow values are valid YAML too


def _serialize(fmt: str, data: Any, original: str) -> str:
    """The whole document written back by the format's serializer (loses comments and layout)."""
    if fmt == "json":
        indented = re.search(r"^([ \t]+)\S", original, re.MULTILINE)
        text = json.dumps(data, indent=indented.group(1) if indented else None, ensure_ascii=False)
    elif fmt == "yaml":
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    elif fmt == "toml":
        text = tomli_w.dumps(data)
    else:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_dict(data)
        buffer = io.StringIO()
        parser.write(buffer)
        text = buffer.getvalue()
    return text if text.endswith("\n") or not original.endswith("\n") else text + "\n"


def edit_config(fmt: str, text: str, path: tuple[str, ...], *, delete: bool = False,
                value: Any = None) -> str | None:
    """The text with one key removed or given a new value, verified with the real parser.

    Edits the key's own line(s) when that parses to the expected content, else rewrites the
    document with the format's serializer; None when neither gives the expected content.
    """
    data = parse_config(fmt, text)
    expected = _set_path(data, path, value=value, delete=delete)
    lines = text.splitlines(keepends=True)
    span = LOCATORS[fmt](lines, path) if fmt in LOCATORS else None
    attempts = []
    if span:
        start, end = span
        if delete:
            attempts.append("".join(lines[:start] + lines[end:]))
        elif end == start + 1:
            line = lines[start]
            cut = re.search(r"[=:]\s*", line)
            if cut:
                newline = "\n" if line.endswith("\n") else ""
                replaced = line[:cut.start()] + line[cut.start()] + " " + _render_value(fmt, value) + newline
                attempts.append("".join(lines[:start] + [replaced] + lines[end:]))
    try:
        attempts.append(_serialize(fmt, expected, text))
    except (TypeError, ValueError, yaml.YAMLError):
        pass
    for candidate in attempts:
        try:
            if parse_config(fmt, candidate) == expected:
                return candidate
        except Exception:  # noqa: BLE001 - any parser failure means this attempt is unusable
            continue
    return None


def retyped(fmt: str, value: Any) -> Any:
    """A value of another type for a config key, or None when there is no sensible one."""
    if fmt == "ini":
        word = str(value).strip()
        if word.lower() in BOOL_WORDS:
            return "maybe"
        if re.fullmatch(r"[+-]?\d+", word):
            return word + ".5"
        try:
            float(word)
        except ValueError:
            return None
        return word + "%"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
        return ",".join(str(v) for v in value)
    return None


def matches(preconditions: dict[str, Any], target: Target) -> bool:
    """Whether a target's attrs satisfy a type's preconditions (`context` is checked on render)."""
    attrs = target.attrs
    for key, want in preconditions.items():
        if key == "context":
            continue
        if key in attrs:
            ok = attrs[key] in want if isinstance(want, list) else attrs[key] == want
        elif key.startswith(("min_", "max_")) and key[4:] in attrs:
            have = attrs[key[4:]]
            ok = have >= want if key.startswith("min_") else have <= want
        else:
            ok = False
        if not ok:
            return False
    return True


# ---------------------------------------------------------------- context providers


def pip_index_versions(name: str, timeout: float = 30.0) -> list[str]:
    """Release versions of a distribution on the configured index, newest first ([] when unknown)."""
    try:
        result = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                                capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    for line in result.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def older_release(current: str, available: Iterable[str]) -> str | None:
    """The newest final release of another major version older than `current` (else of another minor)."""
    try:
        now = Version(current)
    except InvalidVersion:
        return None
    older = []
    for text in available:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version < now and not version.is_prerelease and not version.is_devrelease:
            older.append(version)
    older.sort(reverse=True)
    for same in (lambda v: v.major == now.major, lambda v: v.release[:2] == now.release[:2]):
        different = [v for v in older if not same(v)]
        if different:
            return str(different[0])
    return None


def _final_versions(available: Iterable[str]) -> list[Version]:
    found = []
    for text in available:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            found.append(version)
    return sorted(found, reverse=True)


def previous_release(current: str, available: Iterable[str]) -> str | None:
    """The newest final release older than `current`, or None."""
    try:
        now = Version(current)
    except InvalidVersion:
        return None
    return next((str(v) for v in _final_versions(available) if v < now), None)


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_on(requirement: str, dist: str) -> SpecifierSet | None:
    """The version specifier of a "name specifier" requirement string on `dist` (None: not on it,
    or no specifier)."""
    name, _, spec = requirement.partition(" ")
    if canonical_name(name) != canonical_name(dist) or not spec.strip():
        return None
    try:
        return SpecifierSet(spec.replace(" ", ""))
    except InvalidSpecifier:
        return None


def violating_release(current: str, spec: SpecifierSet, available: Iterable[str]) -> str | None:
    """A final release outside `spec`: the oldest newer one than `current` (an upgrade too far), else
    the newest older one (a downgrade too far); None when every release satisfies it."""
    try:
        now = Version(current)
    except InvalidVersion:
        return None
    outside = [v for v in _final_versions(available) if not spec.contains(v, prereleases=False)]
    newer = sorted(v for v in outside if v > now)
    older = [v for v in outside if v < now]
    chosen = newer[0] if newer else older[0] if older else None
    return str(chosen) if chosen else None


def wrong_value(value: str) -> str:
    """A plausible but wrong value of the same shape: flipped flag, -1, another path, a typo."""
    low = value.lower()
    if low in FLIPS:
        flipped = FLIPS[low]
        return flipped.upper() if value.isupper() else flipped
    if re.fullmatch(r"-?\d+", value):
        return "-1" if value != "-1" else "1"
    if "/" in value.rstrip("/"):
        head, _, tail = value.rstrip("/").rpartition("/")
        return f"{head}/old-{tail}"
    if len(value) >= 4:
        mid = len(value) // 2
        typo = value[:mid - 1] + value[mid] + value[mid - 1] + value[mid + 1:]
        if typo != value:
            return typo
    return value + "-x"


@dataclass
class Job:
    """Everything a context provider may look at for one (target, type) pair."""

    project: Project
    healthy: HealthyState
    target: Target
    rng: random.Random
    base: dict[str, Any]


class ProceduralInverter:
    """Applies catalogue types to enumerated targets, in a seeded, family-interleaved order."""

    def __init__(self, catalogue_types: Iterable[InversionType], seed: int = 0,
                 version_lookup: Callable[[str], list[str]] = pip_index_versions) -> None:
        self.types = sorted(catalogue_types, key=lambda t: t.id)
        self.seed = seed
        self.version_lookup = version_lookup
        self._versions: dict[str, list[str]] = {}
        self._facts: dict[Path, CodeFacts] = {}
        self.providers: dict[str, Callable[[Job], dict[str, Any] | None]] = {
            "bad_version": self._bad_version,
            "drop_key": self._drop_key,
            "retype_key": self._retype_key,
            "wrong_value": self._wrong_value,
            "previous_version": self._previous_version,
            "conflicting_version": self._conflicting_version,
            "user_config": self._user_config,
        }
        for itype in self.types:
            unknown = set(itype.preconditions.get("context", [])) - set(self.providers)
            if unknown:
                raise CatalogueError(f"{itype.id}: unknown context providers {sorted(unknown)}")

    # ---- order

    def pairs(self, healthy: HealthyState, targets: list[Target], shuffle: bool) -> list[deque]:
        """One queue of applicable (target, type) pairs per family, families in seeded order."""
        rng = random.Random(self.seed)
        by_family: dict[str, list[tuple[Target, InversionType]]] = {}
        seen = set()
        for target in targets:
            if target.key in seen:
                continue
            seen.add(target.key)
            for itype in self.types:
                if (itype.target == target.kind and healthy.backend in itype.backends
                        and matches(itype.preconditions, target)):
                    by_family.setdefault(itype.family, []).append((target, itype))
        queues = []
        for family in sorted(by_family):
            pairs = by_family[family]
            if shuffle:
                pairs.sort(key=lambda p: (p[1].id, p[0].key))
                keys = [rng.random() ** (1.0 / p[1].weight) for p in pairs]
                pairs = [p for _, p in sorted(zip(keys, pairs), key=lambda kp: -kp[0])]
            queues.append(deque(pairs))
        rng.shuffle(queues)
        return queues

    def candidates(self, project: Project, healthy: HealthyState, targets: list[Target] | None = None,
                   budget: int | None = None, shuffle: bool | None = None) -> list[Inversion]:
        """Rendered inversions, round-robin across families, at most `budget` of them.

        `targets` in a caller's order (a graph's ranking) keep that order unless `shuffle` is
        True; without targets, the enumerated ones are shuffled with the seed.
        """
        if shuffle is None:
            shuffle = targets is None
        if targets is None:
            targets = enumerate_targets(project, healthy)
        queues = self.pairs(healthy, targets, shuffle)
        out: list[Inversion] = []
        while queues and (budget is None or len(out) < budget):
            for queue in list(queues):
                if budget is not None and len(out) >= budget:
                    break
                while queue:
                    inversion = self.apply(project, healthy, *queue.popleft())
                    if inversion:
                        out.append(inversion)
                        break
                if not queue:
                    queues.remove(queue)
        return out

    # ---- rendering

    def apply(self, project: Project, healthy: HealthyState, target: Target,
              itype: InversionType) -> Inversion | None:
        """The type rendered for the target, or None when its context cannot be computed."""
        context = self.context(project, healthy, target, itype)
        return None if context is None else render(itype, target, context)

    def context(self, project: Project, healthy: HealthyState, target: Target,
                itype: InversionType) -> dict[str, Any] | None:
        """The template variables of one (target, type) pair: the kind's base plus requested providers."""
        base = self.base_context(project, healthy, target)
        if base is None:
            return None
        rng = random.Random(f"{self.seed}:{itype.id}:{target.key}")
        job = Job(project=project, healthy=healthy, target=target, rng=rng, base=base)
        context = dict(base)
        for name in itype.preconditions.get("context", []):
            extra = self.providers[name](job)
            if extra is None:
                return None
            context.update(extra)
        return context

    def base_context(self, project: Project, healthy: HealthyState, target: Target) -> dict[str, Any] | None:
        """The context every type of a target kind may use (None when the target is gone)."""
        if target.kind in ("config", "data"):
            path = project.path / (target.path or target.name)
            if not path.is_file():
                return None
            data = path.read_bytes()
            return {"original_b64": b64_lines(data), "mode": format(stat.S_IMODE(path.stat().st_mode), "o"),
                    "size": len(data)}
        if target.kind == "distribution":
            version = healthy.distributions.get(target.name) or target.attrs.get("version")
            return {"dist": target.name, "version": version} if version else None
        if target.kind in ("module", "script", "submodule", "bytecode"):
            dist = target.attrs.get("dist")
            version = healthy.distributions.get(dist or "") or target.attrs.get("version")
            return {"dist": dist, "version": version}
        if target.kind == "envvar":
            value = healthy.env.get(target.name, target.attrs.get("value"))
            return {"value": value} if value is not None else None
        return {}

    def _releases(self, job: Job) -> list[str]:
        """Releases on the index of the target's distribution (the target itself, or its `dist`)."""
        name = job.target.name if job.target.kind == "distribution" else job.target.attrs.get("dist") or ""
        if name and name not in self._versions:
            self._versions[name] = self.version_lookup(name)
        return self._versions.get(name, [])

    def _bad_version(self, job: Job) -> dict[str, Any] | None:
        bad = older_release(job.base.get("version") or "", self._releases(job))
        return {"bad_version": bad} if bad else None

    def _previous_version(self, job: Job) -> dict[str, Any] | None:
        before = previous_release(job.base.get("version") or "", self._releases(job))
        return {"old_version": before} if before else None

    def _conflicting_version(self, job: Job) -> dict[str, Any] | None:
        """A release of the distribution outside what another installed distribution requires of it."""
        name = job.target.name
        wanted = [(canonical_name(d.name), spec) for d in job.healthy.inventory for req in d.requirements
                  if (spec := requirement_on(req, name)) is not None]
        for requirer, spec in sorted(wanted):
            found = violating_release(job.base["version"], spec, self._releases(job))
            if found:
                return {"conflict_version": found, "required_by": requirer, "specifier": str(spec)}
        return None

    def _user_config(self, job: Job) -> dict[str, Any] | None:
        """The project's config with one key (one the code names, preferably) given a value of another
        type: what a stale copy in the user's config folder holds."""
        rel = job.target.attrs.get("project_config")
        fmt = job.target.attrs.get("format")
        path = job.project.path / (rel or "")
        if not rel or not fmt or not path.is_file():
            return None
        config = Target(kind="config", name=rel, path=rel, attrs={"format": fmt})
        inner = Job(project=job.project, healthy=job.healthy, target=config, rng=job.rng,
                    base={"original_b64": b64_lines(path.read_bytes())})
        found = self._retype_key(inner)
        return None if found is None else {"user_key": found["key"], "user_b64": found["broken_b64"],
                                           "user_value": found["new_value"]}

    def _code_facts(self, project: Project) -> CodeFacts:
        if project.path not in self._facts:
            self._facts[project.path] = code_facts(project.path)
        return self._facts[project.path]

    def _config_keys(self, job: Job, want: Callable[[Any], bool]) -> tuple[str, str, list] | None:
        fmt = job.target.attrs.get("format")
        text = base64.b64decode(job.base["original_b64"]).decode("utf-8")
        keys = [(p, v) for p, v in leaf_keys(fmt, parse_config(fmt, text)) if want(v)]
        named = self._code_facts(job.project).strings
        preferred = [kv for kv in keys if kv[0][-1] in named]
        pool = preferred or keys
        job.rng.shuffle(pool)
        return (fmt, text, pool) if pool else None

    def _drop_key(self, job: Job) -> dict[str, Any] | None:
        found = self._config_keys(job, lambda v: True)
        if not found:
            return None
        fmt, text, pool = found
        for path, _ in pool:
            broken = edit_config(fmt, text, path, delete=True)
            if broken is not None:
                return {"key": ".".join(path), "broken_b64": b64_lines(broken.encode())}
        return None

    def _retype_key(self, job: Job) -> dict[str, Any] | None:
        fmt = job.target.attrs.get("format")
        found = self._config_keys(job, lambda v: retyped(fmt, v) is not None)
        if not found:
            return None
        fmt, text, pool = found
        for path, value in pool:
            new = retyped(fmt, value)
            broken = edit_config(fmt, text, path, value=new)
            if broken is not None:
                return {"key": ".".join(path), "broken_b64": b64_lines(broken.encode()),
                        "old_value": json.dumps(value, ensure_ascii=False),
                        "new_value": json.dumps(new, ensure_ascii=False)}
        return None

    def _wrong_value(self, job: Job) -> dict[str, Any] | None:
        value = job.base["value"]
        wrong = wrong_value(value)
        return {"wrong_value": wrong} if wrong != value else None
