"""The catalogue's types beyond the first 33 (issue 12), each validated for real on a fixture that
has its target.

One world per module: fixtures/stocksync (a program with a lock file, a PID file, a SQLite
database, a TLS client of a local server, a user config, a cache, a plugin installed with pip and
a console script, on PyYAML with libyaml, python-dateutil and tabulate) built with the local
backend and its healthy state measured as a crawl measures it. Per type: the target it applies to
among the enumerated ones, the type rendered by the procedural inverter (its context from the real
providers, or, where the newest releases on the index tell nothing apart, a pinned older release),
then the real validator (miner.validate.validate): the break fails some tests, not all (unless
the type is whole-suite), changes no protected file and leaves no copy of what it changed; the
fix, recovering from the type's declared evidence with at most a short literal, brings every
test back; the replayed break fails the same tests. The Docker-only types run in a container of
the same fixture (marked docker).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import copy_fixture

from miner.catalogue import CATEGORIES, load_catalogue, render
from miner.evidence import MAX_FIX_LITERAL, literal_bytes
from miner.inverters.procedural import ProceduralInverter, matches
from miner.inverters.system import targets_beneath
from miner.inverters.targets import enumerate_targets
from miner.models import Candidate, HealthyState, Project, Target
from miner.prepare import prepare
from miner.projectfiles import test_file_of as file_of_test
from miner.sandbox.base import Backend
from miner.sources import parse_source
from miner.validate import Context, healthy_manifest, validate

CATALOGUE = load_catalogue()
CA_OVERRIDE = "env.SSL_CERT_FILE=/sandbox/project/certs/dev-ca.pem"

# Types of a Dockerized project's image (its ENV): validated on fixtures/node-service by
# tests/test_node_service.py.
IMAGE_CASES = {"env/image-var-unset", "env/image-var-wrong"}
# Types of an npm project's node_modules and of node's settings, validated on fixtures/node-lib (a
# library on ms, escape-html, debug and qs, tested with tape, built by npm from the registry):
# type -> (target key, tests that must be among the F2P, tests that must stay passing)
DURATION = {"test/duration.js::humanDuration", "test/duration.js::parseDuration"}
HTML = {"test/html.js::htmlLine escapes the message", "test/html.js::htmlLine escapes the level"}
LOGGER = {"test/logger.js::a logger writes when its namespace is enabled"}
QUERY = {"test/query.js::logQuery joins the levels with commas",
         "test/query.js::parseLogQuery reads the levels back as a list"}
NPM_CASES: dict[str, tuple[str, set[str], set[str]]] = {
    "deps/node-package-removed": ("node-package:ms", DURATION | LOGGER, HTML),  # debug needs ms too
    "deps/node-entry-corrupt": ("node-package:escape-html", HTML, DURATION | LOGGER),
    "deps/node-main-nowhere": ("node-package:debug", LOGGER, DURATION | HTML),  # main is src/index.js
    "fs/node-package-unreadable": ("node-package:escape-html", HTML, DURATION | LOGGER),
    "env/node-options-preload-missing": ("setting:node", DURATION | HTML | LOGGER | QUERY, set()),
    # qs 5 (the registry's newest older major) ignores arrayFormat 'comma' and the comma option
    "deps/node-wrong-version": ("node-package:qs", QUERY, DURATION | HTML | LOGGER),
}
# Types of an npm project's lockfile, programs, peers and npm config, validated on fixtures/node-cli
# (a config checker on ajv 6 or 8, ajv-keywords and js-yaml, with a lockfile, whose tests
# run js-yaml's program and an npm script): type -> (target key, F2P among, tests that must stay passing)
CLI = "test/cli.test.js::"
NODE_CLI_CASES: dict[str, tuple[str, set[str], set[str]]] = {
    # js-yaml 4.0.0 (the oldest release ^4.0.0 accepts) has no yaml.types: the loader fails
    "deps/node-lockfile-drift": ("node-package:js-yaml", {"test/load.test.js::merge keys share a block"},
                                 {f"{CLI}js-yaml's program prints the example as JSON"}),
    # ajv 6 (package.json accepts it, ajv-keywords' peer range does not): the plugin fails, the core works
    "deps/node-peer-conflict": ("node-package:ajv", {"test/keywords.test.js::two routes cannot share a path"},
                                {"test/schema.test.js::a missing key is reported",
                                 "test/formats.test.js::an owner must be an email address"}),
    "fs/node-bin-link-missing": ("node-package:js-yaml", {f"{CLI}js-yaml's program prints the example as JSON"},
                                 {"test/load.test.js::merge keys share a block"}),
    "home/npmrc-script-shell": ("setting:npm", {f"{CLI}npm run yaml2json prints the example as JSON"},
                                {f"{CLI}js-yaml's program prints the example as JSON"}),
}
# type -> (target key, context pinned by the test or None, tests that must be among the F2P)
LOCAL_CASES: dict[str, tuple[str, dict | None, set[str]]] = {
    "virtualenv/interpreter-link": ("setting:python", None, set()),
    "virtualenv/pyvenv-cfg-missing": ("setting:python", None, set()),
    "virtualenv/script-shebang": ("script:stocksync", None, {"tests/test_cli.py::test_status"}),
    "virtualenv/sitecustomize-warnings": ("setting:warnings", None, {"tests/test_prices.py::test_fetch_over_http"}),
    "virtualenv/bytecode-corrupt": ("bytecode:stocksync.ledger", None, {"tests/test_ledger.py::test_quantity"}),
    "virtualenv/stale-bytecode": ("bytecode:tabulate", {"old_version": "0.8.10"},
                            {"tests/test_report.py::test_report_table"}),
    "virtualenv/stale-bytecode-major": ("bytecode:tabulate", {"bad_version": "0.8.10"},
                                  {"tests/test_report.py::test_report_table"}),
    "env/pythonhome": ("setting:python", None, set()),
    "env/pythonwarnings-error": ("setting:warnings", None, {"tests/test_prices.py::test_fetch_over_http"}),
    "env/pythonioencoding-ascii": ("setting:locale", None,
                                   {"tests/test_cli.py::test_quantity_prints_the_product_name"}),
    "env/locale-c-no-utf8": ("setting:locale", None, {"tests/test_report.py::test_product_names"}),
    "env/tz-elsewhere": ("setting:timezone", None, {"tests/test_report.py::test_sync_day_is_the_utc_day"}),
    "env/pythonoptimize": ("setting:optimize", None, {"tests/test_ledger.py::test_adjust_rejects_a_fractional_delta"}),
    "deps/submodule-deleted": ("submodule:dateutil.parser", None, {"tests/test_report.py::test_parse_stamp"}),
    "deps/mixed-versions": ("submodule:humanize.number", {"old_version": "3.14.0"},
                            {"tests/test_report.py::test_restock_eta"}),
    "deps/requirement-conflict": ("distribution:tabulate", None, {"tests/test_report.py::test_report_table"}),
    "deps/foreign-python-wheel": ("distribution:pyyaml", None, {"tests/test_report.py::test_product_names"}),
    "deps/foreign-platform-wheel": ("distribution:pyyaml", None, {"tests/test_report.py::test_product_names"}),
    "net/ca-bundle-missing": ("setting:tls", None, {"tests/test_prices.py::test_fetch_over_https_trusts_the_shop_ca"}),
    "net/http-proxy-dead": ("setting:proxy", None, {"tests/test_prices.py::test_fetch_over_http"}),
    "state/stale-lock": ("state:lock:var/stocksync.lock", None,
                         {"tests/test_lock.py::test_sync_lock_is_taken_and_released"}),
    "state/stale-pidfile": ("state:pid:var/stocksync.pid", None, {"tests/test_lock.py::test_no_daemon_runs"}),
    "state/cache-unwritable": ("state:cache:~/.cache", None, {"tests/test_prices.py::test_prices_are_cached"}),
    "state/sqlite-readonly": ("data:var/ledger.db", None,
                              {"tests/test_ledger.py::test_adjust_dry_run_leaves_the_ledger"}),
    "state/sqlite-hot-journal": ("data:var/ledger.db", None, {"tests/test_ledger.py::test_quantity"}),
    "home/user-config-override": ("setting:user-config", {"user_key": "report.width"}, set()),
    "home/xdg-config-home": ("setting:user-config", {"user_key": "report.currency"}, set()),
    "home/pip-user-install": ("setting:pip", None,
                              {"tests/test_plugins.py::test_a_plugin_installed_with_pip_is_found"}),
    "config/bom": ("config:stocksync.toml", None, {"tests/test_config.py::test_project_settings"}),
    "config/appended-twice": ("config:stocksync.toml", None, {"tests/test_config.py::test_project_settings"}),
    "data/bom": ("data:data/suppliers.csv", None, {"tests/test_suppliers.py::test_supplier"}),
    "data/catalogue-uncompiled": ("data:stocksync/locale/fr/LC_MESSAGES/stocksync.mo", None,
                                  {"tests/test_report.py::test_report_in_french"}),
}
DOCKER_CASES: dict[str, tuple[str, set[str]]] = {
    "net/nsswitch-no-files": ("setting:resolver",
                              {"tests/test_prices.py::test_fetch_over_https_trusts_the_shop_ca"}),
    # (csv, which suppliers.py imports, is no target: pytest loads it, through importlib.metadata;
    # nor tomllib, which config.py imports: pytest reads the project's pyproject.toml with it)
    "system/stdlib-module-removed": ("system:stdlib:sqlite3", {"tests/test_ledger.py::test_quantity"}),
    "system/stdlib-extension-removed": ("system:stdlib-extension:_sqlite3", {"tests/test_ledger.py::test_quantity"}),
    # the base image carries msgfmt (gettext), so exported tasks of the type can be repaired
    "data/catalogue-uncompiled": ("data:stocksync/locale/de/LC_MESSAGES/stocksync.mo",
                                  {"tests/test_report.py::test_report_in_german"}),
}
FIRST_33 = {
    "config/missing-key", "config/syntax-error", "config/wrong-type", "data/corrupt-bytes", "data/crlf",
    "data/truncate", "data/wrong-encoding", "deps/bad-pth", "deps/broken-metadata", "deps/corrupt-module", "deps/shadow-module",
    "deps/uninstall", "deps/wrong-version", "env/poison-pythonpath", "env/unset-var", "env/wrong-var",
    "fs/broken-symlink", "fs/deleted", "fs/no-exec", "fs/unreadable-config", "fs/unreadable", "service/config-value",
    "service/dependency-removed", "service/port-changed", "system/ca-bundle-empty", "system/debpkg-remove",
    "system/interpreter-symlink", "system/ld-library-path", "system/ld-so-conf", "system/locale-removed",
    "system/syslib-corrupt", "system/syslib-remove", "system/zoneinfo-removed",
}


@dataclass
class World:
    project: Project
    state: HealthyState
    backend: Backend
    ctx: Context
    targets: dict[str, Target]


def make_world(base: Path, backend: Backend, fixture: str = "stocksync", overrides: str = CA_OVERRIDE,
               min_passing: int = 20) -> World:
    root = copy_fixture(fixture, base / fixture)
    source = parse_source(f"{root} {overrides}".strip(), base)
    prepared = prepare(source, backend, None, work=base / "work", timeout=600)
    state = prepared.state
    assert state is not None and len(state.passing) > min_passing, state
    tests = {f for f in map(file_of_test, state.outcomes) if f}
    targets = enumerate_targets(prepared.project, state, targets_beneath(state.system, prepared.project.path, tests))
    ctx = Context(backend, prepared.env, state, healthy_manifest(backend, prepared.env), timeout=600)
    return World(prepared.project, state, backend, ctx, {t.key: t for t in targets})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    from miner.sandbox.local import LocalBackend

    return make_world(tmp_path_factory.mktemp("stocksync-local"), LocalBackend())


def run_case(world: World, type_id: str, target_key: str, pinned: dict | None, expected: set[str]) -> Candidate:
    itype = CATALOGUE[type_id]
    assert target_key in world.targets, f"{target_key} not enumerated: {sorted(world.targets)}"
    target = world.targets[target_key]
    assert matches(itype.preconditions, target), f"{type_id} does not apply to {target.key}: {target.attrs}"
    inverter = ProceduralInverter([itype], seed=0)
    if pinned and "user_key" in pinned:  # the seed whose stale user config retypes that key
        rendered = (ProceduralInverter([itype], seed=seed).apply(world.project, world.state, target, itype)
                    for seed in range(40))
        inversion = next((i for i in rendered if i and f" {pinned['user_key']} " in i.summary), None)
    elif pinned:
        context = inverter.base_context(world.project, world.state, target) or {}
        inversion = render(itype, target, {**context, **pinned})
    else:
        inversion = inverter.apply(world.project, world.state, target, itype)
    assert inversion is not None, f"no context for {type_id} on {target.key}"
    assert inversion.evidence and all(e.detail for e in inversion.evidence)
    assert literal_bytes(inversion.fix_script) <= MAX_FIX_LITERAL, inversion.fix_script
    candidate = validate(world.ctx, inversion, whole_suite_ok=itype.whole_suite)
    assert candidate.status == "validated", f"{candidate.rule}: {candidate.detail}\n" + "\n".join(
        candidate.logs.values())[-3000:]
    assert expected <= set(candidate.f2p), sorted(candidate.f2p)
    if not itype.whole_suite:
        assert candidate.p2p
    return candidate


def test_the_catalogue_has_sixty_types_each_with_its_category_and_evidence() -> None:
    assert len(CATALOGUE) >= 60
    assert {t.category for t in CATALOGUE.values()} <= set(CATEGORIES)
    added = set(CATALOGUE) - FIRST_33
    assert added == set(LOCAL_CASES) | set(DOCKER_CASES) | IMAGE_CASES | set(NPM_CASES) | set(NODE_CLI_CASES), \
        "every added type has its case here"
    for type_id in added:
        itype = CATALOGUE[type_id]
        assert itype.evidence, f"{type_id} declares no evidence"
    raw = {path.relative_to(path.parents[1]).with_suffix("").as_posix(): path.read_text()
           for path in (Path(__file__).parents[1] / "inversions").glob("[!_]*/*.yaml")}
    assert all(text.startswith("category: ") for text in raw.values()), "every built-in file names its category"


def test_the_fixture_has_a_target_of_every_new_kind(tmp_path: Path) -> None:
    """Target enumeration alone (no sandbox): the stocksync fixture's files and code, a made-up inventory."""
    from miner.models import Distribution, Source

    root = copy_fixture("stocksync", tmp_path / "stocksync")
    project = Project(source=Source(raw=str(root), kind="local", location=str(root)), repo=str(root), commit="0",
                      path=root)
    inventory = [Distribution(name="stocksync", version="0.6.1", top_level=["stocksync"],
                              requirements=["tabulate >=0.9"], requires=["tabulate"]),
                 Distribution(name="tabulate", version="0.10.0", top_level=["tabulate"],
                              files=["tabulate/__init__.py", "tabulate/version.py"]),
                 Distribution(name="pyyaml", version="6.0.4", top_level=["yaml"], extensions=["yaml/_yaml.so"],
                              files=["yaml/__init__.py", "yaml/constructor.py", "yaml/tests/x.py"])]
    state = HealthyState(repo=str(root), commit="0", backend="local", test_command="python -m pytest",
                         outcomes={"tests/test_ledger.py::test_quantity": "passed"}, inventory=inventory,
                         distributions={d.name: d.version for d in inventory}, project_dists=["stocksync"],
                         env={"SSL_CERT_FILE": "/sandbox/project/certs/dev-ca.pem"},
                         site_packages="/sandbox/venv/lib/python3.11/site-packages")
    targets = {t.key: t for t in enumerate_targets(project, state)}
    assert {"setting:python", "setting:warnings", "setting:locale", "setting:timezone", "setting:optimize",
            "setting:tls", "setting:proxy", "setting:resolver", "setting:user-config", "setting:pip",
            "state:lock:var/stocksync.lock", "state:pid:var/stocksync.pid", "state:cache:~/.cache",
            "submodule:yaml.constructor", "submodule:tabulate.version", "bytecode:stocksync.ledger",
            "bytecode:tabulate", "bytecode:yaml.constructor",
            "data:stocksync/locale/fr/LC_MESSAGES/stocksync.mo"} <= set(targets)  # gettext("stocksync")
    assert "submodule:yaml.tests.x" not in targets  # a distribution's own tests are not a target
    assert not any(key.startswith("bytecode:tests") or key.endswith("conftest") for key in targets)
    assert targets["setting:tls"].attrs == {"aspect": "tls", "variable": "SSL_CERT_FILE", "stated": True,
                                            "value": "/sandbox/project/certs/dev-ca.pem", "stated_in": ["README.md"]}
    assert targets["setting:user-config"].attrs["user_path"] == "stocksync/stocksync.toml"
    assert targets["data:var/ledger.db"].attrs["sqlite"] and not targets["data:data/suppliers.csv"].attrs["sqlite"]
    assert targets["distribution:pyyaml"].attrs["has_extensions"]
    assert targets["bytecode:stocksync.ledger"].path == "/sandbox/project/stocksync/ledger.py"
    assert targets["bytecode:tabulate"].attrs["file"] == "tabulate/__init__.py"


@pytest.mark.slow
@pytest.mark.parametrize("type_id", sorted(LOCAL_CASES))
def test_type_validates_on_the_fixture(world: World, type_id: str) -> None:
    target_key, pinned, expected = LOCAL_CASES[type_id]
    run_case(world, type_id, target_key, pinned, expected)


@pytest.fixture(scope="module")
def npm_world(tmp_path_factory) -> World:
    from miner.sandbox.local import LocalBackend

    return make_world(tmp_path_factory.mktemp("node-lib-local"), LocalBackend(), "node-lib", "", 5)


@pytest.mark.slow
@pytest.mark.parametrize("type_id", sorted(NPM_CASES))
def test_npm_type_validates_on_the_node_fixture(npm_world: World, type_id: str) -> None:
    target_key, failing, passing = NPM_CASES[type_id]
    candidate = run_case(npm_world, type_id, target_key, None, failing)
    assert not passing & set(candidate.f2p), sorted(candidate.f2p)


@pytest.fixture(scope="module")
def node_cli_world(tmp_path_factory) -> World:
    from miner.sandbox.local import LocalBackend

    return make_world(tmp_path_factory.mktemp("node-cli-local"), LocalBackend(), "node-cli", "", 10)


@pytest.mark.slow
@pytest.mark.parametrize("type_id", sorted(NODE_CLI_CASES))
def test_npm_type_validates_on_the_cli_fixture(node_cli_world: World, type_id: str) -> None:
    target_key, failing, passing = NODE_CLI_CASES[type_id]
    candidate = run_case(node_cli_world, type_id, target_key, None, failing)
    assert not passing & set(candidate.f2p), sorted(candidate.f2p)


@pytest.fixture(scope="module")
def docker_world(tmp_path_factory) -> World:
    from miner.sandbox.docker import DockerBackend

    return make_world(tmp_path_factory.mktemp("stocksync-docker"), DockerBackend())


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("type_id", sorted(DOCKER_CASES))
def test_docker_type_validates_on_the_fixture(docker_world: World, type_id: str) -> None:
    target_key, expected = DOCKER_CASES[type_id]
    run_case(docker_world, type_id, target_key, None, expected)


@pytest.mark.slow
@pytest.mark.docker
def test_stdlib_modules_the_runner_needs_are_no_targets(docker_world: World) -> None:
    # stocksync's config.py imports tomllib, but pytest reads the project's pyproject.toml with it:
    # deleting it stops the whole suite, so the system inventory leaves it to the runner
    assert "system:stdlib:tomllib" not in docker_world.targets
    assert "system:stdlib:sqlite3" in docker_world.targets
