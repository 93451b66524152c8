"""The one target enumeration: everything of a project a break may touch, with its facts.

The crawl (miner.pipeline.choose_candidates) and `miner graph` both call `enumerate_targets`;
the graph only ranks and predicts what it returns (miner.graph.select_targets), and the
procedural inverter (miner.inverters.procedural) decides how to break each target.

    targets = enumerate_targets(project, healthy, extra=backend_targets)

Read from the project's files on the host (project.path: the files miner.projectfiles calls
project files) and the healthy state. The project's ecosystem gives the targets of its own kinds
(miner.ecosystems.targets: Python's distribution, module, script, submodule, bytecode and setting,
miner.ecosystems.python.targets; npm's node-package and setting, miner.ecosystems.node.npm); this
module gives the kinds no language owns, fed with what the code names (CodeFacts, from the
ecosystem's parse) or, for a project known by observation, what its traced run read:

  config        ini/cfg/toml/yaml/json files its format's parser accepts
  data          other files whose name a string in the code mentions
  envvar        variables the code reads that the healthy environment sets; a Dockerized
                project's image variables
  state         run-time state the code names: lock and PID files, the user's cache folder
  extra         what the caller adds: the backend's system and service targets

Also here, for rule 8 (project-files evidence): `stated_in`, the project files (outside the test
tree) that state a key's value on one line: a README's configuration section, an example config,
a default in the code.

Rule 7 of the acceptance rules holds here: nothing under the project's test tree (including the
files the healthy run collected tests from) nor the runner's configuration is a target, and
neither is the project's code, packaging, docs, dotfiles or dot folders (`projectfiles.may_be_target`).
"""

from __future__ import annotations

import configparser
import json
import re
import stat
import tomllib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from miner import ecosystems
from miner.ecosystems.base import CodeFacts, TargetKit
from miner.models import HealthyState, Project, Target
from miner.projectfiles import PROGRAM_SUFFIXES, in_test_tree, may_be_target, project_files, test_file_of

MAX_FILE_BYTES = 1024 * 1024  # config/data files are embedded (base64) in the fix script
CONFIG_FORMATS = {".ini": "ini", ".cfg": "ini", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}
FLAG_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off"}
EVIDENCE_FILE_BYTES = 256 * 1024  # project files larger than this are not read for stated values
SQLITE_MAGIC = b"SQLite format 3\x00"
# Files a traced program reads that are its package manifest, not its environment.
MANIFEST_NAMES = {"package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
                  "Gemfile", "Gemfile.lock", "go.mod", "go.sum", "Cargo.toml", "Cargo.lock", "composer.json"}


# ---------------------------------------------------------------- what the code names


# ---------------------------------------------------------------- stated values (evidence)


def project_texts(root: Path, test_files: Iterable[str] = ()) -> dict[str, list[str]]:
    """The lines of every readable text file of the project outside its test tree (the tests are
    the judge, not evidence), by project-relative path."""
    tests = set(test_files)
    texts = {}
    for rel in project_files(root):
        path = root / rel
        if in_test_tree(rel, tests) or path.stat().st_size > EVIDENCE_FILE_BYTES:
            continue
        try:
            texts[rel] = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def stated_in(root: Path, key: str, value: str, exclude: str, test_files: Iterable[str] = (),
              texts: dict[str, list[str]] | None = None) -> list[str]:
    """Project files (but `exclude`, and outside the test tree) with a line naming both `key` and,
    after it, `value`: where the project states the value (a README, an example config, a default
    in the code). `texts` (from project_texts) saves reading the files again."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(key)}(?![\w-]).*(?<![\w.-]){re.escape(value)}(?![\w-])")
    if texts is None:
        texts = project_texts(root, test_files)
    return [rel for rel, lines in texts.items() if rel != exclude and any(pattern.search(line) for line in lines)]


# ---------------------------------------------------------------- config files


def parse_config(fmt: str, text: str) -> Any:
    """The parsed content of a config text with the format's real parser (raises when invalid)."""
    if fmt == "json":
        return json.loads(text)
    if fmt == "yaml":
        return yaml.safe_load(text)
    if fmt == "toml":
        return tomllib.loads(text)
    if fmt == "ini":
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        defaults = dict(parser.defaults())
        data = {"DEFAULT": defaults} if defaults else {}
        for section in parser.sections():
            data[section] = {k: v for k, v in parser.items(section, raw=True) if k not in defaults}
        return data
    raise ValueError(f"unknown config format {fmt}")


def config_format(rel: str, data: bytes) -> str | None:
    """ini/toml/yaml/json when the file's suffix says so and that parser accepts its content."""
    fmt = CONFIG_FORMATS.get(PurePosixPath(rel).suffix.lower())
    if not fmt:
        return None
    try:
        parsed = parse_config(fmt, data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - a file its parser rejects is not a config file of that format
        return None
    return fmt if parsed is not None else None


# ---------------------------------------------------------------- targets


def _file_attrs(data: bytes, mode: int) -> dict[str, Any]:
    try:
        data.decode("utf-8")
        is_text = b"\x00" not in data
    except UnicodeDecodeError:
        is_text = False
    return {
        "size": len(data),
        "mode": format(stat.S_IMODE(mode), "o"),
        "is_text": is_text,
        "has_crlf": b"\r\n" in data,
        "has_bom": data.startswith(b"\xef\xbb\xbf"),
        "lines": data.count(b"\n"),
        "sqlite": data.startswith(SQLITE_MAGIC),
    }


def test_files_of(healthy: HealthyState) -> set[str]:
    """The files the healthy run collected tests from."""
    return {path for path in map(test_file_of, healthy.outcomes) if path}


def file_targets(root: Path, files: list[str], healthy: HealthyState, facts: CodeFacts) -> list[Target]:
    """Config files (parseable) and data files a string in the code names, outside the test tree."""
    protected, tests = set(healthy.protected), test_files_of(healthy)
    targets = []
    for rel in files:
        if rel in protected or not may_be_target(rel, tests):
            continue
        path = root / rel
        info = path.stat()
        if info.st_size > MAX_FILE_BYTES:
            continue
        data = path.read_bytes()
        attrs = {"ext": path.suffix.lower().lstrip("."), **_file_attrs(data, info.st_mode)}
        fmt = config_format(rel, data)
        name = PurePosixPath(rel).name
        if fmt:
            targets.append(Target(kind="config", name=rel, path=rel, attrs={**attrs, "format": fmt}))
        elif data and "." in name and facts.mentions(name):
            targets.append(Target(kind="data", name=rel, path=rel, attrs=attrs))
    return targets


def state_targets(project: Project, facts: CodeFacts) -> list[Target]:
    """Lock and PID files the code names (in a folder of the project, or under ~), and the user's
    cache folder when the code keeps one there."""
    targets: dict[str, Target] = {}
    for text in sorted(facts.strings):
        text = text.strip()
        name = PurePosixPath(text).name
        role = "lock" if name.endswith(".lock") else "pid" if name.endswith(".pid") else None
        if not role or "%" in text or "{" in text:
            continue
        if text.startswith("~/"):
            where, path = "home", text
        elif not text.startswith("/") and ".." not in text and (project.path / text).parent.is_dir() \
                and not in_test_tree(text) and not (project.path / text).exists():
            where, path = "project", text
        else:
            continue
        targets.setdefault(path, Target(kind="state", name=f"{role}:{path}", path=path,
                                        attrs={"role": role, "where": where}))
    if "XDG_CACHE_HOME" in facts.env_reads or any(".cache" in s for s in facts.strings):
        targets["~/.cache"] = Target(kind="state", name="cache:~/.cache", path="~/.cache",
                                     attrs={"role": "cache", "where": "home"})
    return list(targets.values())


def _value_kind(value: str) -> str:
    if value.lower() in FLAG_WORDS:
        return "bool"
    if re.fullmatch(r"-?\d+", value):
        return "int"
    if "://" in value:
        return "url"
    return "path" if "/" in value else "str"


def envvar_targets(healthy: HealthyState, facts: CodeFacts) -> list[Target]:
    """Variables the code reads that the healthy environment (the shell's startup file) sets."""
    return [Target(kind="envvar", name=name, attrs={"value": healthy.env[name], "value_kind": _value_kind(
        healthy.env[name]), "where": "env-file"}) for name in sorted(facts.env_reads) if name in healthy.env]


def image_variable_targets(healthy: HealthyState) -> list[Target]:
    """Variables a Dockerized project's image sets (its ENV), as its traced run recorded them."""
    variables = ((healthy.system or {}).get("trace") or {}).get("variables") or {}
    return [Target(kind="envvar", name=name, attrs={"value": value, "value_kind": _value_kind(value),
                                                     "where": "image"}) for name, value in sorted(variables.items())]


def _allowed_extra(target: Target, tests: set[str]) -> bool:
    """A backend's target that names a project file (a service's config) obeys rule 7 too."""
    path = target.path or ""
    return not path or path.startswith("/") or may_be_target(path, tests)


def traced_files(healthy: HealthyState) -> list[str]:
    """Project files the traced healthy run read (never wrote), code and package manifests left out."""
    entries = ((healthy.system or {}).get("trace") or {}).get("files") or []
    return sorted({e["rel"] for e in entries if e.get("rel") and not e.get("write")
                   and PurePosixPath(e["rel"]).suffix.lower() not in PROGRAM_SUFFIXES
                   and PurePosixPath(e["rel"]).name not in MANIFEST_NAMES})


# What an ecosystem's targets place among its own (miner.ecosystems.base.TargetKit).
KIT = TargetKit(file_targets=file_targets, envvar_targets=envvar_targets, state_targets=state_targets)


def observed_targets(project: Project, files: list[str], healthy: HealthyState) -> list[Target]:
    """The project files a traced run read and the image's variables: how a project outside
    Python is known (miner.sandbox.docker.trace)."""
    read = traced_files(healthy)
    facts = CodeFacts(names=frozenset(PurePosixPath(rel).name for rel in read))
    return [*file_targets(project.path, [f for f in read if f in files], healthy, facts),
            *image_variable_targets(healthy)]


def enumerate_targets(project: Project, healthy: HealthyState, extra: Iterable[Target] = ()) -> list[Target]:
    """Every target of the project worth trying, grouped by kind (each group sorted), then `extra`.

    The project's ecosystem gives its own (miner.ecosystems.targets: Python's distributions,
    modules, settings, ...; npm's packages); a project known by observation (outside Python)
    adds the project files its traced run read and its image's variables; `extra` is what lies
    beneath it (the backend's system and service targets).
    """
    files = project_files(project.path)
    tests = test_files_of(healthy)
    found = ecosystems.targets(project, healthy, files, KIT)
    if ecosystems.observed(files, healthy):
        found += observed_targets(project, files, healthy)
    return [*found, *(t for t in extra if _allowed_extra(t, tests))]
