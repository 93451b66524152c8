"""The catalogue: YAML types load, validate, select and render into syntactically valid bash, and
every type declares the evidence its fix recovers from, with a fix that carries no copy (rule 8)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import SAMPLE_TARGETS, sample_target

from miner.catalogue import REPO_DIR, CatalogueError, load_catalogue, render, select_types
from miner.ecosystems.python.registry import published
from miner.evidence import EVIDENCE_KINDS, MAX_FIX_LITERAL, decoded_payload, literal_bytes, needs_network
from miner.models import Target

ROOT = Path(__file__).resolve().parent.parent
LOCAL_FAMILIES = {"deps", "config", "data", "fs", "env"}  # the families every backend can run
CONTAINER_FAMILIES = {"system", "service"}  # what lies beneath the project: containers only

SAMPLE_CONTEXT = {
    "mode": "644", "size": 40, "dist": "six", "version": "1.17.0",
    "value": "it's production", "bad_version": "1.16.0", "key": "server.port", "line": 3,
    "key_line": "port = 8080", "old_line": "port = 8080", "new_line": 'port = "8080"',
    "old_value": "8080", "new_value": '"8080"', "wrong_value": "prodcution", "sibling": "conf/other.yaml",
    **published("greeter==0.3.0").context(), "stated_in": ["README.md"], "stated": "README.md states APP_MODE=production",
    "evidence_kind": "project-files",
    "old_version": "1.16.0", "conflict_version": "1.4.1", "required_by": "python-dateutil", "specifier": ">=1.5",
    "user_key": "server.port", "user_b64": "aGVsbAo=", "user_value": '"8080"',
    "entry": "node_modules/debug/src/index.js",
    "drift_version": "4.0.0", "declared": "package.json asks ^4.0.0", "integrity": "sha512-x",
    "peer_of": "ajv-keywords", "peer_version": "5.1.0", "peer_range": "^8.8.2",
    "program": "js-yaml", "bin_file": "bin/js-yaml.js", "link": "node_modules/.bin/js-yaml",
}
# Types that choose between kinds of evidence (a context provider's choice, or the target's own
# attrs.evidence): every choice is rendered.
EVIDENCE_CHOICES = [({"evidence_kind": "project-files"}, {"evidence": "package-index"}),
                    ({"evidence_kind": "published-source"}, {"evidence": "debian-archive"})]


GOOD_TYPE = """\
description: test type
target: data
evidence:
  - kind: reversible
    detail: "{{ target.path }} was emptied"
summary: "{{ target.path }} emptied"
break_script: |
  set -euo pipefail
  : > "$MINER_PROJECT"/{{ target.path | q }}
fix_script: |
  set -euo pipefail
  echo restored > "$MINER_PROJECT"/{{ target.path | q }}
"""


def renderings(itype):
    """The type rendered for a sample target: every config format, every choice of evidence."""
    formats = ["ini", "toml", "yaml", "json"] if itype.target == "config" else [None]
    for fmt in formats:
        for context, attrs in EVIDENCE_CHOICES:
            target = sample_target(itype)
            attrs = {k: v for k, v in attrs.items() if k in target.attrs} | ({"format": fmt} if fmt else {})
            target = target.model_copy(update={"attrs": {**target.attrs, **attrs}})
            yield render(itype, target, {**SAMPLE_CONTEXT, **context})


def bash_syntax_ok(script: str) -> bool:
    return subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0


def write_type(root: Path, type_id: str, text: str) -> Path:
    path = root / f"{type_id}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_catalogue_has_enough_types_and_families():
    catalogue = load_catalogue()
    families = {t.family for t in catalogue.values()}
    assert len(catalogue) >= 10
    assert {"deps", "config", "data", "fs", "env"} <= families
    for type_id, itype in catalogue.items():
        assert type_id == itype.id == f"{itype.family}/{type_id.split('/', 1)[1]}"
        if itype.preconditions.get("where") == "image":  # a Dockerized project's image variables
            assert itype.backends == ["docker"], itype.id
        elif itype.family in LOCAL_FAMILIES:
            assert set(itype.backends) == {"local", "docker"}
        elif itype.family in CONTAINER_FAMILIES:
            assert itype.backends == ["docker"]
        else:  # the venv, state, network and user settings: both, unless the type edits the system's /etc
            edits_etc = bool(re.search(r"(sed -i|>) ?['\"]?/etc/|F=/etc/", itype.break_script))
            assert "docker" in itype.backends and ("local" in itype.backends) != edits_etc, itype.id
        assert itype.description and itype.summary


def test_every_type_renders_to_valid_bash():
    for itype in load_catalogue().values():
        for inversion in renderings(itype):
            assert inversion.type_id == itype.id and inversion.family == itype.family
            assert "\n" not in inversion.summary and inversion.summary
            for script in (inversion.break_script, inversion.fix_script):
                assert script.startswith("set -euo pipefail\n"), itype.id
                assert bash_syntax_ok(script), f"{itype.id}: {script}"
            assert inversion.network_fix == itype.network.get("fix", False)


def test_every_type_declares_evidence_and_its_fix_carries_no_copy():
    """Rule 8 over the whole catalogue: each rendering names its evidence (known kinds, a detail),
    and its fix decodes no payload and carries at most a short literal."""
    for itype in load_catalogue().values():
        assert itype.evidence, f"{itype.id} declares no evidence"
        for inversion in renderings(itype):
            assert inversion.evidence and all(e.kind in EVIDENCE_KINDS and e.detail for e in inversion.evidence)
            assert decoded_payload(inversion.fix_script) is None, itype.id
            assert literal_bytes(inversion.fix_script) <= MAX_FIX_LITERAL, itype.id
            assert "original_b64" not in itype.fix_script + itype.break_script


def test_network_follows_the_evidence_and_index_use():
    """A fix reaches the index or the archive exactly when its evidence needs the network (the
    validator gives it the network then); the type's own flag agrees when the kind is fixed."""
    # (npm's registry: an npm command that may fetch, unless it is told --offline)
    uses_index = re.compile(r"pip (install|download)|apt-get (install|update|download)|\$APT "
                            r"|npm (pack|install|ci|view)\b(?![^\n]*--offline)")
    for itype in load_catalogue().values():
        if uses_index.search(itype.break_script):
            assert itype.network.get("break"), f"{itype.id}: its break uses the index without network"
        elif itype.family not in CONTAINER_FAMILIES:
            assert not itype.network.get("break"), f"{itype.id}: its break asks for network it does not use"
        for inversion in renderings(itype):
            kinds = [e.kind for e in inversion.evidence]
            assert bool(uses_index.search(inversion.fix_script)) == needs_network(kinds), (itype.id, kinds)
        if all("{{" not in e.kind for e in itype.evidence):
            assert itype.network.get("fix", False) == needs_network([e.kind for e in itype.evidence]), itype.id


def test_render_missing_context_names_the_type():
    itype = load_catalogue()["deps/uninstall"]
    with pytest.raises(CatalogueError, match="deps/uninstall.*version"):
        render(itype, SAMPLE_TARGETS["distribution"], {})


def test_render_refuses_wrong_target_kind():
    with pytest.raises(CatalogueError, match="distribution"):
        render(load_catalogue()["deps/uninstall"], SAMPLE_TARGETS["data"], SAMPLE_CONTEXT)


def test_shell_quoting_of_names():
    itype = load_catalogue()["env/unset-var"]
    target = Target(kind="envvar", name="APP_MODE", attrs={})
    inversion = render(itype, target, {"value": "it's $HOME", "stated_in": ["README.md"], "stated": "README.md states it"})
    assert bash_syntax_ok(inversion.fix_script)
    assert "'\"'\"'" in inversion.fix_script  # the single quote survives two levels of quoting


def test_select_types_by_family_and_id():
    catalogue = load_catalogue()
    assert select_types(catalogue, None) == list(catalogue.values())
    deps = select_types(catalogue, "deps")
    assert deps and all(t.family == "deps" for t in deps)
    mixed = select_types(catalogue, " data/crlf , env,data/crlf")
    assert [t.id for t in mixed] == sorted({"data/crlf", *(t.id for t in catalogue.values() if t.family == "env")})
    with pytest.raises(CatalogueError, match="nosuch"):
        select_types(catalogue, "deps,nosuch")


def test_extra_dir_adds_and_overrides_types(tmp_path):
    write_type(tmp_path, "data/emptied", GOOD_TYPE)
    write_type(tmp_path, "data/crlf", GOOD_TYPE.replace("test type", "overridden"))
    catalogue = load_catalogue([tmp_path])
    assert catalogue["data/emptied"].family == "data"
    assert catalogue["data/crlf"].description == "overridden"
    assert len(catalogue) == len(load_catalogue()) + 1


@pytest.mark.parametrize("text, reason", [
    ("description: x\ntarget: [unclosed\n", "not valid YAML"),
    ("- a list\n", "mapping"),
    (GOOD_TYPE.replace("target: data", "target: planet"), "target"),
    (GOOD_TYPE + "colour: blue\n", "colour"),
    (GOOD_TYPE + "backends: [cloud]\n", "backends"),
    (GOOD_TYPE + "network: {brake: true}\n", "network"),
    (GOOD_TYPE + "weight: 0\n", "weight"),
    (GOOD_TYPE.replace("emptied", "{{ emptied"), "summary"),
    (GOOD_TYPE + "id: data/other\n", "disagree"),
    (GOOD_TYPE.replace("kind: reversible", "kind: memory"), "evidence kind"),
])
def test_bad_files_give_errors_naming_the_file(tmp_path, text, reason):
    path = write_type(tmp_path, "data/broken-type", text)
    with pytest.raises(CatalogueError) as info:
        load_catalogue([tmp_path])
    assert str(path) in str(info.value)
    assert reason in str(info.value)


def test_missing_extra_dir_is_an_error(tmp_path):
    with pytest.raises(CatalogueError, match="not found"):
        load_catalogue([tmp_path / "absent"])


def test_catalogue_ships_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["miner.catalogue_data"] == "inversions"
    assert "miner.catalogue_data" in config["packages"]
    patterns = config["package-data"]["miner.catalogue_data"]
    files = [p.relative_to(REPO_DIR).as_posix() for p in REPO_DIR.rglob("*.yaml")]
    assert files and REPO_DIR == ROOT / "inversions"
    for rel in files:
        assert any(fnmatch.fnmatch(rel, pattern) for pattern in patterns), rel


def test_every_package_of_miner_is_listed_for_a_plain_install():
    """`pip install .` installs only the packages pyproject.toml lists: a new folder of modules
    left out installs a miner that fails at its first import."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "miner").rglob("__init__.py")}
    assert found <= set(config["packages"]), sorted(found - set(config["packages"]))
