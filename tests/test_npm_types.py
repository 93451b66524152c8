"""npm's break types of issue 24's second part (lockfile drift, a `.bin` link, a peer conflict, a
wrong ~/.npmrc): npm's ranges (miner.ecosystems.node.semver), what the inventory records of each
package (its declared ranges, peerDependencies, programs, integrity), the targets and context
providers the types use. Each type's validation on fixtures/node-cli (the real validator, npm from
the registry) is tests/test_catalogue_types.py's NODE_CLI_CASES."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import copy_fixture

from miner.catalogue import load_catalogue, render
from miner.ecosystems.base import Job
from miner.ecosystems.node import npm, providers, semver
from miner.evidence import MAX_FIX_LITERAL, literal_bytes
from miner.models import HealthyState, NodePackage, Project, Source, Target

NODE = shutil.which("node")
NEW_TYPES = ("deps/node-lockfile-drift", "deps/node-peer-conflict", "fs/node-bin-link-missing",
             "home/npmrc-script-shell")
# What npm installs of fixtures/node-cli's lockfile (the registry's releases below are made up
# around the real ones, so the providers' choices do not move with the registry).
PACKAGES = [
    NodePackage(path="node_modules/ajv", name="ajv", version="8.20.0", requires=["fast-uri"],
                ranges={"fast-uri": "^3.0.1"}, integrity="sha512-ajv"),
    NodePackage(path="node_modules/ajv-formats", name="ajv-formats", version="2.1.1", requires=["ajv"],
                ranges={"ajv": "^8.0.0"}, peers={"ajv": "^8.0.0"}),
    NodePackage(path="node_modules/ajv-keywords", name="ajv-keywords", version="5.1.0", requires=["fast-deep-equal"],
                ranges={"fast-deep-equal": "^3.1.3"}, peers={"ajv": "^8.8.2"}),
    NodePackage(path="node_modules/fast-uri", name="fast-uri", version="3.1.0"),
    NodePackage(path="node_modules/fast-deep-equal", name="fast-deep-equal", version="3.1.3"),
    NodePackage(path="node_modules/js-yaml", name="js-yaml", version="4.3.2", requires=["argparse"],
                ranges={"argparse": "^2.0.1"}, bins={"js-yaml": "bin/js-yaml.js"}, integrity="sha512-yaml"),
    NodePackage(path="node_modules/argparse", name="argparse", version="2.0.1"),
]
RELEASES = {"ajv": ["8.20.0", "8.17.1", "8.12.0", "8.8.1", "7.2.4", "6.15.0", "6.12.6", "6.0.0", "5.5.2",
                    "8.0.0-beta.1"],
            "js-yaml": ["5.1.0", "4.3.2", "4.3.0", "4.1.0", "4.0.0", "3.14.1"],
            "fast-uri": ["3.1.0", "3.0.6", "2.4.0"],
            "argparse": ["2.0.1", "1.0.10"]}


class FakeRegistry:
    """The releases a provider asks of the registry, newest first."""

    def releases(self, registry: str, name: str) -> list[str]:
        assert registry == "npm"
        return RELEASES.get(name, [])


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> Project:
    root = copy_fixture("node-cli", tmp_path_factory.mktemp("node-cli") / "node-cli")
    return Project(source=Source(raw=str(root), kind="local", location=str(root)), repo=str(root), commit="0",
                   path=root)


def healthy(packages: list[NodePackage]) -> HealthyState:
    return HealthyState(repo="r", commit="0", backend="local", test_command="node --test",
                        outcomes={"test/cli.test.js::x": "passed"}, node_packages=packages)


def targets_of(project: Project) -> dict[str, Target]:
    return {t.key: t for t in [*npm.package_targets(project.path, PACKAGES),
                               *npm.setting_targets(PACKAGES, project.path)]}


def job(project: Project, target: Target) -> Job:
    return Job(project=project, healthy=healthy(PACKAGES), target=target, rng=random.Random(0),
               base={"version": target.attrs.get("version", "")})


@pytest.mark.parametrize(("version", "declared", "expected"), [
    ("8.20.0", "^6.12.6 || ^8.12.0", True), ("7.2.4", "^6.12.6 || ^8.12.0", False),
    ("8.8.1", "^8.8.2", False), ("0.2.5", "^0.2.3", True), ("0.3.0", "^0.2.3", False), ("0.0.4", "^0.0.3", False),
    ("1.2.9", "~1.2.3", True), ("1.3.0", "~1.2.3", False), ("2.0.0", "1.x", False), ("1.9.9", "1", True),
    ("5.0.0", "*", True), ("3.0.0", ">=2 <3", False), ("2.5.0", "1.2 - 2", True), ("3.0.0", "1.2 - 2", False),
    ("4.0.0", ">= 4.0.0", True), ("1.0.0", "<=1.0", True), ("1.1.0", "<=1.0", False), ("2.0.0", ">1", True),
    ("1.0.0-beta.1", "*", False), ("1.0.0", "latest", None), ("1.0.0", "github:a/b", None),
])
def test_npm_ranges_read_as_npm_reads_them(version: str, declared: str, expected: bool | None) -> None:
    assert semver.satisfies(version, declared) is expected


def test_a_state_recorded_before_the_new_fields_still_loads() -> None:
    old = {"path": "node_modules/a", "name": "a", "version": "1.0.0", "dev": False, "requires": ["b"],
           "entry": "node_modules/a/index.js"}
    package = NodePackage.model_validate(old)
    assert (package.ranges, package.peers, package.bins, package.integrity) == ({}, {}, {}, "")
    state = healthy([package]).model_dump_json()
    assert HealthyState.model_validate_json(state).node_packages == [package]


@pytest.mark.skipif(NODE is None, reason="node")
def test_the_inventory_reads_ranges_peers_programs_and_integrity(tmp_path: Path) -> None:
    """INVENTORY_SCRIPT on a hidden lockfile as npm writes it (no install: the entries are npm's)."""
    lock = {"lockfileVersion": 3, "packages": {
        "node_modules/js-yaml": {"version": "4.3.2", "integrity": "sha512-yaml", "dependencies": {"argparse": "^2.0.1"},
                                 "bin": {"js-yaml": "bin/js-yaml.js"}},
        "node_modules/ajv-keywords": {"version": "5.1.0", "dependencies": {"fast-deep-equal": "^3.1.3"},
                                      "peerDependencies": {"ajv": "^8.8.2"}},
        "node_modules/argparse": {"version": "2.0.1"}}}
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / ".package-lock.json").write_text(json.dumps(lock))
    done = subprocess.run([NODE, "-e", npm.INVENTORY_SCRIPT], cwd=tmp_path, capture_output=True, text=True, check=True)
    found = {p.name: p for p in npm.parse_inventory(done.stdout)}
    assert found["js-yaml"].bins == {"js-yaml": "bin/js-yaml.js"} and found["js-yaml"].integrity == "sha512-yaml"
    assert found["js-yaml"].ranges == {"argparse": "^2.0.1"} and found["js-yaml"].requires == ["argparse"]
    assert found["ajv-keywords"].peers == {"ajv": "^8.8.2"} and found["argparse"].bins == {}


def test_the_programs_the_tests_run_and_npm_are_targets(cli: Project, tmp_path: Path) -> None:
    """node-cli's tests run js-yaml's program (node_modules/.bin) and npm (`npm run yaml2json`):
    js-yaml's target names its program and npm's config is a setting; node-lib's run neither."""
    targets = targets_of(cli)
    assert targets["node-package:js-yaml"].attrs["bins_run"] == ["js-yaml"]
    assert targets["node-package:ajv"].attrs["bins_run"] == []
    assert "setting:npm" in targets and "setting:node" in targets
    lib = copy_fixture("node-lib", tmp_path / "node-lib")
    assert npm.programs_run(lib) == set() and not npm.runs_npm(lib)
    assert [t.key for t in npm.setting_targets(PACKAGES, lib)] == ["setting:node"]
    assert npm.programs_named("exec('npx --no-install tsc -p .')", set()) == {"tsc"}


def test_drift_stays_inside_every_declared_range(cli: Project) -> None:
    """js-yaml: package.json asks ^4.0.0 and 4.3.2 is the newest 4.x: the oldest older minor.
    ajv: package.json asks ^6.12.6 || ^8.12.0 and ajv-formats ^8.0.0: never 6 nor 7 (npm ls would
    see those), an older 8 minor. fast-uri: ajv asks ^3.0.1, 3.0.6 is the one other minor."""
    targets = targets_of(cli)
    drift = {name: providers.node_drift(FakeRegistry(), job(cli, targets[f"node-package:{name}"]))
             for name in ("js-yaml", "ajv", "fast-uri", "argparse")}
    assert drift["js-yaml"]["drift_version"] == "4.0.0" and drift["js-yaml"]["integrity"] == "sha512-yaml"
    assert drift["ajv"]["drift_version"] == "8.12.0"
    assert "node_modules/ajv-formats asks ^8.0.0" in drift["ajv"]["declared"]
    assert drift["fast-uri"]["drift_version"] == "3.0.6"
    assert drift["argparse"] is None  # ^2.0.1 accepts no other release


def test_a_peer_conflict_is_outside_the_peer_range_and_inside_every_declared_one(cli: Project) -> None:
    """ajv-keywords' peer range asks ajv ^8.8.2, package.json accepts ^6.12.6 || ^8.12.0: ajv 6.
    With ajv-formats installed too (it depends on ajv ^8.0.0, not only as a peer), none: npm would
    nest a copy of ajv 8 for it, a copy of what the break changed."""
    without_formats = [p for p in PACKAGES if p.name != "ajv-formats"]
    targets = targets_of(cli)
    found = providers.node_peer_conflict(FakeRegistry(), Job(
        project=cli, healthy=healthy(without_formats), target=targets["node-package:ajv"], rng=random.Random(0),
        base={"version": "8.20.0"}))
    assert found == {"conflict_version": "6.15.0", "peer_of": "ajv-keywords", "peer_version": "5.1.0",
                     "peer_range": "^8.8.2", "declared": "package.json asks ^6.12.6 || ^8.12.0"}
    assert providers.node_peer_conflict(FakeRegistry(), job(cli, targets["node-package:ajv"])) is None
    # a package no installed package peer-depends on has no conflict
    assert providers.node_peer_conflict(FakeRegistry(), job(cli, targets["node-package:js-yaml"])) is None


def test_the_bin_link_is_the_program_the_tests_run(cli: Project) -> None:
    targets = targets_of(cli)
    assert providers.node_bin(FakeRegistry(), job(cli, targets["node-package:js-yaml"])) == {
        "program": "js-yaml", "bin_file": "bin/js-yaml.js", "link": "node_modules/.bin/js-yaml"}
    assert providers.node_bin(FakeRegistry(), job(cli, targets["node-package:ajv"])) is None


def test_each_new_type_renders_with_its_evidence_and_a_short_fix(cli: Project) -> None:
    catalogue, targets = load_catalogue(), targets_of(cli)
    contexts = {"deps/node-lockfile-drift": ("node-package:js-yaml", providers.node_drift),
                "deps/node-peer-conflict": ("node-package:ajv", None),
                "fs/node-bin-link-missing": ("node-package:js-yaml", providers.node_bin),
                "home/npmrc-script-shell": ("setting:npm", None)}
    for type_id, (key, provider) in contexts.items():
        target = targets[key]
        extra = provider(FakeRegistry(), job(cli, target)) if provider else {}
        if type_id == "deps/node-peer-conflict":
            extra = {"conflict_version": "6.15.0", "peer_of": "ajv-keywords", "peer_version": "5.1.0",
                     "peer_range": "^8.8.2", "declared": "package.json asks ^6.12.6 || ^8.12.0"}
        inversion = render(catalogue[type_id], target, {"version": target.attrs.get("version", ""), **extra})
        assert inversion.evidence and all(e.detail for e in inversion.evidence), type_id
        assert literal_bytes(inversion.fix_script) <= MAX_FIX_LITERAL, inversion.fix_script
        assert "npm" in inversion.fix_script, type_id  # npm repairs each: ci, rebuild, config delete
