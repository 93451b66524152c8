"""The inversion catalogue: kinds of break, kept as data, loaded, selected and rendered.

Each inversion type is one YAML file, `inversions/<family>/<name>.yaml`, shipped inside the
package as `miner.catalogue_data`. Its id is "<family>/<name>", taken from the path. The file
holds the fields of `miner.models.InversionType` except id and family:

    description: what the break does
    category: python-environment | dependencies | compatibility | ...   # CATEGORIES
    target: distribution | module | config | data | script | envvar | ...
    preconditions: {attr: value, min_attr: n, context: [provider, ...]}   # see inversions/README.md
    backends: [local, docker]
    network: {break: false, fix: true}
    whole_suite: false
    weight: 1.0
    evidence: [{kind: reversible|package-index|debian-archive|project-files|published-source, detail: template}]
                # rule 8: what every fix of the type recovers from; the kind may itself be a template
                # naming the target's ("{{ target.attrs.evidence }}"), rendered to one of those kinds
    summary: one-line jinja2 template
    break_script: jinja2 template of a bash script
    fix_script: jinja2 template of a bash script (the oracle)

Templates see `target` (a miner.models.Target) plus the context the inverter computed
(original_b64, mode, version, ...), are rendered with StrictUndefined, and can use the
filters `q` (shell quoting) and `b64` (base64 of a text, for break scripts: a fix never decodes a
payload, rule 8). Adding a type touches no code.

Usage:
    catalogue = load_catalogue()
    types = select_types(catalogue, "deps,config/syntax-error")
    inversion = render(catalogue["deps/uninstall"], target, {"version": "1.17.0"})
    type_ids = types_in_categories(catalogue, ["network-security"])   # what a category filter keeps
"""

from __future__ import annotations

import base64
import functools
import shlex
from collections.abc import Iterable, Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, get_args

import jinja2
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from miner.models import Evidence, EvidenceKind, EvidenceTemplate, Inversion, InversionType, Target, TargetKind

PACKAGE = "miner.catalogue_data"
REPO_DIR = Path(__file__).resolve().parent.parent / "inversions"
BACKENDS = {"local", "docker"}
NETWORK_KEYS = {"break", "fix"}
EVIDENCE_KINDS = get_args(EvidenceKind)
# What kind of real breakage a type stands for (the categories tasks are filtered and counted by).
CATEGORIES = {
    "python-environment": "the virtual environment and how the interpreter starts (links, pyvenv.cfg, "
                          "console-script shebangs, .pth files, sitecustomize, bytecode, PYTHONPATH/PYTHONHOME)",
    "dependencies": "installed distributions and their files",
    "compatibility": "versions, wheels, platforms and interpreter settings that do not fit together "
                     "(requirement conflicts, foreign wheels, warnings, locale, time zone, optimisation)",
    "network-security": "what the code's network use depends on: TLS trust, proxies, name resolution",
    "concurrency-state": "run-time state: lock and PID files, databases, caches",
    "configuration": "configuration the program reads, the project's own and the user's (~/.config, "
                     "XDG_CONFIG_HOME, pip's), and the variables it reads",
    "data-files": "data files the program reads",
    "filesystem": "permissions, links and deleted files",
    "system-libraries": "shared libraries, Debian packages, the dynamic loader, locale and time zone data",
    "interpreter-stdlib": "the interpreter and its standard library (containers)",
    "services": "a Dockerized service's configuration and dependencies",
}
# A type file that names no category (a learned one) gets its family's.
FAMILY_CATEGORY = {"deps": "dependencies", "config": "configuration", "data": "data-files", "fs": "filesystem",
                   "env": "configuration", "system": "system-libraries", "service": "services",
                   "virtualenv": "python-environment", "state": "concurrency-state", "net": "network-security",
                   "home": "configuration"}


class CatalogueError(Exception):
    """A catalogue file is unreadable or invalid, or a type cannot be rendered."""


class TypeFile(BaseModel):
    """The schema of one catalogue YAML file (strict: unknown keys are typos)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None  # optional; must agree with the path when given
    family: str | None = None
    description: str
    category: str | None = None  # CATEGORIES; default: the family's (FAMILY_CATEGORY)
    target: TargetKind
    preconditions: dict[str, Any] = {}
    backends: list[str] = ["local", "docker"]
    network: dict[str, bool] = {}
    whole_suite: bool = False
    evidence: list[EvidenceTemplate] = []  # rule 8: [{kind: package-index, detail: "{{ dist }}=={{ version }}"}]
    summary: str
    break_script: str
    fix_script: str
    weight: float = 1.0

    @field_validator("backends")
    @classmethod
    def _known_backends(cls, value: list[str]) -> list[str]:
        unknown = set(value) - BACKENDS
        if unknown or not value:
            raise ValueError(f"backends must be a non-empty subset of {sorted(BACKENDS)}, got {value}")
        return value

    @field_validator("evidence")
    @classmethod
    def _known_evidence(cls, value: list[EvidenceTemplate]) -> list[EvidenceTemplate]:
        for item in value:
            if item.kind not in EVIDENCE_KINDS and "{{" not in item.kind:
                raise ValueError(f"evidence kind must be among {', '.join(EVIDENCE_KINDS)} (or a template), "
                                 f"got {item.kind!r}")
        return value

    @field_validator("category")
    @classmethod
    def _known_category(cls, value: str | None) -> str | None:
        if value is not None and value not in CATEGORIES:
            raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {value!r}")
        return value

    @field_validator("network")
    @classmethod
    def _known_network_keys(cls, value: dict[str, bool]) -> dict[str, bool]:
        unknown = set(value) - NETWORK_KEYS
        if unknown:
            raise ValueError(f"network keys must be among {sorted(NETWORK_KEYS)}, got {sorted(unknown)}")
        return value


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["b64"] = lambda value: base64.b64encode(
        value if isinstance(value, bytes) else str(value).encode()
    ).decode()
    return env


ENV = _environment()


def _builtin_root() -> Traversable:
    """The packaged catalogue, or the repository's inversions/ folder when not installed."""
    try:
        root = resources.files(PACKAGE)
    except ModuleNotFoundError:
        return REPO_DIR
    return root if root.is_dir() else REPO_DIR


def _yaml_files(root: Traversable) -> Iterator[tuple[str, Traversable]]:
    """(family/name, file) for every <family>/<name>.yaml under a catalogue root, sorted."""
    families = sorted((d for d in root.iterdir() if d.is_dir() and not d.name.startswith(("_", "."))),
                      key=lambda d: d.name)
    for family in families:
        for item in sorted(family.iterdir(), key=lambda f: f.name):
            if item.is_file() and item.name.endswith((".yaml", ".yml")):
                yield f"{family.name}/{item.name.rsplit('.', 1)[0]}", item


def load_type(type_id: str, text: str, origin: str) -> InversionType:
    """Parse and validate one catalogue file; `origin` names it in errors."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{origin}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise CatalogueError(f"{origin}: expected a mapping of fields, got {type(raw).__name__}")
    try:
        data = TypeFile.model_validate(raw)
    except ValidationError as exc:
        raise CatalogueError(f"{origin}: invalid inversion type: {exc}") from exc
    family = type_id.split("/", 1)[0]
    if data.id not in (None, type_id) or data.family not in (None, family):
        raise CatalogueError(f"{origin}: id/family ({data.id}, {data.family}) disagree with the path ({type_id})")
    for field, text in [("summary", data.summary), ("break_script", data.break_script),
                        ("fix_script", data.fix_script),
                        *(("evidence", text) for e in data.evidence for text in (e.kind, e.detail))]:
        try:
            ENV.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise CatalogueError(f"{origin}: {field}: template syntax error line {exc.lineno}: {exc.message}") from exc
    fields = data.model_dump(exclude={"id", "family"})
    fields["category"] = data.category or FAMILY_CATEGORY.get(family, "configuration")
    try:
        return InversionType(id=type_id, family=family, **fields)
    except ValidationError as exc:
        raise CatalogueError(f"{origin}: invalid inversion type: {exc}") from exc


def load_catalogue(extra_dirs: Iterable[Path] = ()) -> dict[str, InversionType]:
    """Every inversion type by id: the built-in catalogue, then extra folders (which override)."""
    catalogue: dict[str, InversionType] = {}
    for root in [_builtin_root(), *map(Path, extra_dirs)]:
        if not root.is_dir():
            raise CatalogueError(f"{root}: catalogue folder not found")
        for type_id, item in _yaml_files(root):
            origin = str(item)
            try:
                text = item.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CatalogueError(f"{origin}: cannot read: {exc}") from exc
            catalogue[type_id] = load_type(type_id, text, origin)
    return dict(sorted(catalogue.items()))


def select_types(catalogue: dict[str, InversionType], spec: str | None) -> list[InversionType]:
    """Types named by a comma list of exact ids or family names; all of them when spec is empty."""
    if not spec or not spec.strip():
        return list(catalogue.values())
    chosen: dict[str, InversionType] = {}
    for word in (w.strip() for w in spec.split(",")):
        if not word:
            continue
        if word in catalogue:
            matched = [catalogue[word]]
        else:
            matched = [t for t in catalogue.values() if t.family == word]
        if not matched:
            families = sorted({t.family for t in catalogue.values()})
            raise CatalogueError(f"unknown inversion type or family {word!r} (families: {', '.join(families)})")
        chosen.update((t.id, t) for t in matched)
    return sorted(chosen.values(), key=lambda t: t.id)


@functools.lru_cache(maxsize=2048)
def _template(text: str) -> jinja2.Template:
    """A template compiled once: every candidate of every project renders the same few texts."""
    return ENV.from_string(text)


def types_in_categories(catalogue: dict[str, InversionType], categories: Iterable[str]) -> set[str]:
    """Ids of the types in any of the categories; an unknown category is a CatalogueError."""
    wanted = set(categories)
    unknown = sorted(wanted - set(CATEGORIES))
    if unknown:
        raise CatalogueError(f"unknown category {unknown[0]!r} (categories: {', '.join(CATEGORIES)})")
    return {t.id for t in catalogue.values() if t.category in wanted}


def _render_one(itype: InversionType, field: str, variables: dict[str, Any], text: str | None = None) -> str:
    try:
        return _template(getattr(itype, field) if text is None else text).render(variables)
    except jinja2.UndefinedError as exc:
        raise CatalogueError(f"{itype.id}: {field}: {exc.message} (missing context)") from exc
    except jinja2.TemplateError as exc:
        raise CatalogueError(f"{itype.id}: {field}: {exc}") from exc


def render(itype: InversionType, target: Target, context: dict[str, Any] | None = None) -> Inversion:
    """One concrete inversion: the type's templates rendered for a target and its context."""
    if target.kind != itype.target:
        raise CatalogueError(f"{itype.id}: applies to {itype.target} targets, not {target.kind}")
    variables = {**(context or {}), "target": target}
    summary = " ".join(_render_one(itype, "summary", variables).split())
    return Inversion(
        type_id=itype.id,
        family=itype.family,
        target=target,
        break_script=_render_one(itype, "break_script", variables),
        fix_script=_render_one(itype, "fix_script", variables),
        summary=summary,
        network_break=itype.network.get("break", False),
        network_fix=itype.network.get("fix", False),
        evidence=[_render_evidence(itype, e, variables) for e in itype.evidence],
    )


def _render_evidence(itype: InversionType, template: EvidenceTemplate, variables: dict[str, Any]) -> Evidence:
    kind = _render_one(itype, "evidence", variables, template.kind).strip()
    if kind not in EVIDENCE_KINDS:
        raise CatalogueError(f"{itype.id}: evidence: {kind!r} is not an evidence kind ({', '.join(EVIDENCE_KINDS)})")
    return Evidence(kind=kind, detail=" ".join(_render_one(itype, "evidence", variables, template.detail).split()))
