"""Procedural inverter: applies catalogue types to enumerated targets, no model needed.

What could break is enumerated elsewhere (miner.inverters.targets, the one enumeration the crawl
and `miner graph` share, ranked by miner.graph); this module decides how to break each target:

    targets = enumerate_targets(project, healthy)          # what could break (inverters.targets)
    inverter = ProceduralInverter(select_types(load_catalogue(), None), seed=0)
    inversions = inverter.candidates(project, healthy, targets=targets, budget=20)

Here: matching types to targets (`matches`), the context providers that compute a type's
template variables (an older release on the index, a config key to drop or retype with the
format's real parser and a one-line edit, a wrong value for a variable, a sibling file's mode, the
project's published source (a PyPI sdist, an npm tarball)), and the order. Config keys the code names in a string are preferred
(from the tree-sitter parse, `miner.ecosystems.python.targets.code_facts`).

Rule 8 (recoverable) starts here: no template sees a copy of an original file, and a provider that
finds the break possible but no evidence to repair it from (no project file states the dropped
key's value, no published source holds the deleted file) raises NoEvidence. That pair becomes an
`unrecoverable` inversion (no scripts, `no_evidence` says why) which the validator rejects before
anything runs, so it is counted, never dropped silently; it takes no turn and no budget.

A type applies to a target when the kinds agree, the healthy backend is among its backends and
its preconditions hold against Target.attrs (see inversions/README.md):
    {attr: value}       attrs[attr] == value
    {attr: [a, b]}      attrs[attr] in [a, b]
    {min_attr: n}       attrs[attr] >= n        (max_attr: <=)
    {context: [name]}   the named context providers below must succeed (else the pair is skipped,
                        or, when a provider finds no evidence, recorded as unrecoverable)

Order: for a given seed the list is deterministic. Without explicit targets (or with
shuffle=True), each family's (target, type) pairs are shuffled, weighted by the type's weight;
with targets given, their order is kept. Families are then interleaved round-robin, so a
small budget spreads over them.
"""

from __future__ import annotations

import base64
import configparser
import copy
import functools
import io
import json
import random
import re
import stat
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import tomli_w
import yaml

from miner import ecosystems
from miner.catalogue import CatalogueError, render
from miner.ecosystems.base import Job
from miner.inverters.targets import (
    CodeFacts,
    enumerate_targets,
    parse_config,
    project_texts,
    stated_in,
    test_files_of,
)
from miner.models import HealthyState, Inversion, InversionType, Project, Target
from miner.projectfiles import in_test_tree, is_doc, project_files

BOOL_WORDS = {"true", "false", "yes", "no", "on", "off"}
FLIPS = {"true": "false", "false": "true", "1": "0", "0": "1", "yes": "no", "no": "yes", "on": "off", "off": "on"}


class NoEvidence(Exception):
    """The break is possible, but nothing a competent person has would recover the healthy state
    (rule 8): the pair is recorded as unrecoverable instead of being run."""


def unrecoverable(itype: InversionType, target: Target, reason: str) -> Inversion:
    """The (target, type) pair as an inversion with no evidence and no scripts: the validator
    rejects it (`unrecoverable`) before anything runs."""
    return Inversion(type_id=itype.id, family=itype.family, target=target, break_script="", fix_script="",
                     summary=f"{itype.id} on {target.key}: no evidence", no_evidence=reason)


def b64_lines(data: bytes) -> str:
    """Base64 wrapped at 76 columns, for heredocs in break scripts (a fix never decodes one: rule 8)."""
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


def _locate_json(lines: list[str], path: tuple[str, ...]) -> tuple[int, int] | None:
    """The first line holding `"key": value` alone (the edit is checked with the parser after)."""
    pattern = re.compile(rf'^\s*{re.escape(json.dumps(path[-1]))}\s*:\s*[^{{\[\s][^{{\[]*$')
    return next(((i, i + 1) for i, line in enumerate(lines) if pattern.match(line)), None)


LOCATORS = {"ini": _locate_ini, "toml": _locate_toml, "yaml": _locate_yaml, "json": _locate_json}


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
                comma = "," if fmt == "json" and line.rstrip().endswith(",") else ""
                replaced = line[:cut.start()] + line[cut.start()] + " " + _render_value(fmt, value) + comma + newline
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


def line_edit(original: str, edited: str) -> tuple[int, str, str | None] | None:
    """(1-based line, its original text, its new text or None when deleted) when `edited` differs
    from `original` in exactly one line, without line-ending subtleties (CR); else None."""
    before, after = original.split("\n"), edited.split("\n")
    if "\r" in original:
        return None
    if len(after) == len(before) - 1:
        at = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), len(after))
        return (at + 1, before[at], None) if before[:at] + before[at + 1:] == after else None
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    if len(after) == len(before) and len(changed) == 1:
        return changed[0] + 1, before[changed[0]], after[changed[0]]
    return None


def value_texts(fmt: str, value: Any) -> list[str]:
    """How a config value reads in prose or another config file ([] for lists and tables)."""
    if isinstance(value, bool):
        return [json.dumps(value)] if fmt != "ini" else [str(value)]
    if isinstance(value, (int, float)):
        return [repr(value)]
    if isinstance(value, str) and value.strip() and "\n" not in value:
        return [value.strip()]
    return []


def visible(old: Any, new_line: str) -> bool:
    """Whether every scalar of the old value still shows in the retyped line (so the way back is visible)."""
    scalars = old if isinstance(old, list) else [old]
    texts = [json.dumps(v) if isinstance(v, bool) else str(v) for v in scalars]
    return bool(texts) and all(text in new_line for text in texts)


def retyped(fmt: str, value: Any) -> Any:
    """A value of another type for a config key, or None when there is no sensible one."""
    if fmt == "ini":
        word = str(value).strip()
        if word.lower() in BOOL_WORDS:
            return f'"{word}"'  # quoted as in YAML or TOML: no longer a boolean to configparser
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


# ---------------------------------------------------------------- what the project states

STATEMENT_FILE_BYTES = 512 * 1024
EXAMPLE_WORDS = ("example", "sample", "template")


def statement_files(root: Path) -> list[str]:
    """The project's files a person reads for settings: READMEs, docs, example and sample files
    (`.env.example`, `config.sample.ini`), Dockerfiles (an image's ENV), outside the test tree."""
    found = []
    for rel in project_files(root):
        name = PurePosixPath(rel).name.lower()
        wanted = name.startswith("readme") or is_doc(rel) or any(word in name for word in EXAMPLE_WORDS) \
            or name == "dockerfile" or name.endswith(".dockerfile")
        if wanted and not in_test_tree(rel) and (root / rel).stat().st_size <= STATEMENT_FILE_BYTES:
            found.append(rel)
    return found


def stated_values(text: str, name: str) -> list[str]:
    """Values a text states for a variable: `NAME=value` (an assignment, `export`, a .env line) and
    `NAME (value ...)` / `NAME (default value)` (prose; markdown code marks ignored)."""
    plain = text.replace("`", "").replace("*", "")
    word = re.escape(name)
    assigned = re.findall(rf"(?<![\w$]){word}\s*=\s*([\"']?)([^\s\"'#,;]+)\1", plain)
    described = re.findall(rf"(?<![\w$]){word}\s*\(\s*(?:defaults?(?:\s+to)?[:\s]\s*)?[\"']?([^\s,;)\"']+)", plain)
    return [value for _, value in assigned] + described


def stated_value(root: Path, facts: CodeFacts, name: str, value: str) -> tuple[str, str] | None:
    """Where the project states that `name` should be `value`: (file, evidence detail), or None.

    A README, doc or example file's statement first (what a person reads), then a literal default
    the code reads the variable with (`os.getenv("NAME", "value")`, or a module constant)."""
    for rel in statement_files(root):
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if value in stated_values(text, name):
            return rel, f"{rel} states {name}={value}"
    for var, default, rel in sorted(facts.env_defaults):
        if var == name and default == value and not in_test_tree(rel):
            return rel, f"{rel} reads {name} with the default {value!r}"
    return None


class ProceduralInverter:
    """Applies catalogue types to enumerated targets, in a seeded, family-interleaved order."""

    def __init__(self, catalogue_types: Iterable[InversionType], seed: int = 0,
                 releases: dict[str, Callable[[str], list[str]]] | None = None) -> None:
        self.types = sorted(catalogue_types, key=lambda t: t.id)
        self.seed = seed
        self.release_lookups = {**ecosystems.RELEASE_LOOKUPS, **(releases or {})}
        self._releases: dict[tuple[str, str], list[str]] = {}
        self._facts: dict[Path, CodeFacts] = {}
        self._texts: dict[Path, dict[str, list[str]]] = {}
        self._files: dict[Path, set[str]] = {}
        self.providers: dict[str, Callable[[Job], dict[str, Any] | None]] = {
            "drop_key": self._drop_key,
            "retype_key": self._retype_key,
            "wrong_value": self._wrong_value,
            "sibling_mode": self._sibling_mode,
            "published_source": self._published_source,
            "stated_value": self._stated_value,
            "user_config": self._user_config,
            **{name: functools.partial(provider, self) for name, provider in ecosystems.PROVIDERS.items()},
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
        counted = 0  # unrecoverable pairs are kept (to be recorded) but take no turn and no budget
        while queues and (budget is None or counted < budget):
            for queue in list(queues):
                if budget is not None and counted >= budget:
                    break
                while queue:
                    inversion = self.apply(project, healthy, *queue.popleft())
                    if inversion:
                        out.append(inversion)
                        if not inversion.no_evidence:
                            counted += 1
                            break
                if not queue:
                    queues.remove(queue)
        return out

    # ---- rendering

    def apply(self, project: Project, healthy: HealthyState, target: Target,
              itype: InversionType) -> Inversion | None:
        """The type rendered for the target; None when its context cannot be computed, an
        unrecoverable inversion (see `unrecoverable`) when a provider finds no evidence."""
        try:
            context = self.context(project, healthy, target, itype)
        except NoEvidence as exc:
            return unrecoverable(itype, target, str(exc))
        return None if context is None else render(itype, target, context)

    def context(self, project: Project, healthy: HealthyState, target: Target,
                itype: InversionType) -> dict[str, Any] | None:
        """The template variables of one (target, type) pair: the kind's base plus requested
        providers (NoEvidence propagates: see `apply`)."""
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
            # the mode and size, never the content: a fix recovers that from evidence (rule 8)
            return {"mode": format(stat.S_IMODE(path.stat().st_mode), "o"), "size": path.stat().st_size}
        if target.kind == "envvar":
            value = healthy.env.get(target.name, target.attrs.get("value"))
            return {"value": value} if value is not None else None
        return ecosystems.target_context(healthy, target)

    def _user_config(self, job: Job) -> dict[str, Any] | None:
        """The project's config with one key (one the code names, preferably) given a value of another
        type: what a stale copy in the user's config folder holds."""
        rel = job.target.attrs.get("project_config")
        fmt = job.target.attrs.get("format")
        path = job.project.path / (rel or "")
        if not rel or not fmt or not path.is_file():
            return None
        config = Target(kind="config", name=rel, path=rel, attrs={"format": fmt})
        inner = Job(project=job.project, healthy=job.healthy, target=config, rng=job.rng, base={})
        found = self._retype_key(inner)
        if found is None:
            return None
        lines = path.read_text(encoding="utf-8").split("\n")
        lines[found["line"] - 1] = found["new_line"]
        return {"user_key": found["key"], "user_b64": b64_lines("\n".join(lines).encode()),
                "user_value": found["new_value"]}

    def releases(self, registry: str, name: str) -> list[str]:
        """Release versions of a package on a registry ("pypi", "npm"), asked once per inverter."""
        if (registry, name) not in self._releases:
            self._releases[registry, name] = self.release_lookups[registry](name)
        return self._releases[registry, name]

    def _code_facts(self, project: Project) -> CodeFacts:
        if project.path not in self._facts:
            self._facts[project.path] = ecosystems.code_facts(project.path)
        return self._facts[project.path]

    def _project_texts(self, job: Job) -> dict[str, list[str]]:
        if job.project.path not in self._texts:
            self._texts[job.project.path] = project_texts(job.project.path, test_files_of(job.healthy))
        return self._texts[job.project.path]

    def _config_keys(self, job: Job, want: Callable[[Any], bool]) -> tuple[str, str, list] | None:
        """The config's format, text, and its keys (those the code names first, each group shuffled)."""
        fmt = job.target.attrs.get("format")
        try:
            text = (job.project.path / (job.target.path or job.target.name)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        keys = [(p, v) for p, v in leaf_keys(fmt, parse_config(fmt, text)) if want(v)]
        named = self._code_facts(job.project).strings
        preferred = [kv for kv in keys if kv[0][-1] in named]
        others = [kv for kv in keys if kv[0][-1] not in named]
        job.rng.shuffle(preferred)
        job.rng.shuffle(others)
        return (fmt, text, preferred + others) if keys else None

    def _drop_key(self, job: Job) -> dict[str, Any] | None:
        """A key whose line can go (one-line deletion, the rest still parses), and its evidence: a
        project file (not the config itself, not the tests) stating its value, else the published source."""
        found = self._config_keys(job, lambda v: True)
        if not found:
            return None
        fmt, text, pool = found
        droppable = []
        for path, value in pool:
            broken = edit_config(fmt, text, path, delete=True)
            edit = line_edit(text, broken) if broken is not None else None
            if edit and edit[2] is None:
                droppable.append((path, value, edit))
        if not droppable:
            return None
        rel = job.target.path or job.target.name
        texts = self._project_texts(job)
        for path, value, (line, key_line, _) in droppable:
            for shown in value_texts(fmt, value):
                where = stated_in(job.project.path, path[-1], shown, rel, texts=texts)
                if where:
                    return {"key": ".".join(path), "line": line, "key_line": key_line, "value": shown,
                            "stated_in": where, "evidence_kind": "project-files"}
        published = ecosystems.published_source(job.project)
        if published is None:
            keys = ", ".join(".".join(p) for p, _, _ in droppable[:3])
            raise NoEvidence(f"no project file but {rel} states the value of {keys}, and the project has "
                             "no published source")
        path, _, (line, key_line, _) = droppable[0]
        return {"key": ".".join(path), "line": line, "key_line": key_line, "evidence_kind": "published-source",
                **published}

    def _retype_key(self, job: Job) -> dict[str, Any] | None:
        """A key given a value of another type in a one-line edit that keeps the old value visible."""
        fmt = job.target.attrs.get("format")
        found = self._config_keys(job, lambda v: retyped(fmt, v) is not None)
        if not found:
            return None
        fmt, text, pool = found
        hidden = []
        for path, value in pool:
            new = retyped(fmt, value)
            broken = edit_config(fmt, text, path, value=new)
            edit = line_edit(text, broken) if broken is not None else None
            if not edit or edit[2] is None:
                continue
            line, old_line, new_line = edit
            if not visible(value, new_line):
                hidden.append(".".join(path))
                continue
            return {"key": ".".join(path), "line": line, "old_line": old_line, "new_line": new_line,
                    "old_value": json.dumps(value, ensure_ascii=False),
                    "new_value": json.dumps(new, ensure_ascii=False)}
        if hidden:
            raise NoEvidence(f"retyping {', '.join(hidden[:3])} hides the old value")
        return None

    def _sibling_mode(self, job: Job) -> dict[str, Any] | None:
        """A project file next to the target (or in a folder above it) with the target's mode: the
        fix copies that mode (chmod --reference) instead of knowing the original."""
        rel = PurePosixPath(job.target.path or job.target.name)
        want = job.base.get("mode")
        if job.project.path not in self._files:
            self._files[job.project.path] = set(project_files(job.project.path))
        files = self._files[job.project.path]
        folder = rel.parent
        while True:
            for name in sorted(f for f in files if PurePosixPath(f).parent == folder and f != str(rel)):
                path = job.project.path / name
                if not path.is_symlink() and format(stat.S_IMODE(path.stat().st_mode), "o") == want:
                    return {"sibling": name}
            if folder == PurePosixPath("."):
                raise NoEvidence(f"no file next to {rel} or above it has its mode {want}")
            folder = folder.parent

    def _stated_value(self, job: Job) -> dict[str, Any] | None:
        """Where the project's own files state the variable's healthy value (rule 8: `project-files`
        evidence): `stated_in` (the files: one) and `stated` (the evidence's detail). NoEvidence when nowhere."""
        found = stated_value(job.project.path, self._code_facts(job.project), job.target.name, job.base["value"])
        if found is None:
            raise NoEvidence(f"no project file states {job.target.name}={job.base['value']} and no code defaults to it")
        return {"stated_in": [found[0]], "stated": found[1]}

    def _published_source(self, job: Job) -> dict[str, Any] | None:
        published = ecosystems.published_source(job.project)
        if published is None:
            raise NoEvidence(f"a {job.project.source.kind} source has no published source to recover "
                             f"{job.target.path or job.target.name} from")
        return published

    def _wrong_value(self, job: Job) -> dict[str, Any] | None:
        value = job.base["value"]
        wrong = wrong_value(value)
        return {"wrong_value": wrong} if wrong != value else None
