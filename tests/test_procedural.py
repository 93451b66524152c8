"""The procedural inverter: target enumeration, ordering, config editing, and every catalogue
type's break and fix scripts run for real against a real virtual environment.

The end-to-end tests build one small world per module with the local backend: a project folder
with config and data files and a console script, installed with six and iniconfig into the
sandbox's venv, plus its environment file; its README states the defaults of its settings, as
real projects do. Each type's rendered break script runs in a fresh fork of that sandbox (never on
the host) and must change what it says it changes, and its fix script (the oracle), run with the
network only when its evidence needs it, must bring every file of the sandbox back byte for byte.
The world is a folder, so it has no published source: the types that need one are recorded as
unrecoverable there (rule 8), never run.
"""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from test_catalogue_types import LOCAL_CASES

from miner.catalogue import load_catalogue, select_types
from miner.inverters.procedural import (
    ProceduralInverter,
    edit_config,
    line_edit,
    matches,
    retyped,
    stated_value,
    stated_values,
    wrong_value,
)
from miner.ecosystems.python.inventory import collect_inventory
from miner.ecosystems.releases import older_release
from miner.ecosystems.python.providers import conflicting_version, previous_release, requirement_on, violating_release
from miner.healthy import hash_tree
from miner.ecosystems.python.targets import code_facts, dependency_depths
from miner.inverters.targets import enumerate_targets, parse_config
from miner.models import ENV_FILE, PROJECT_DIR, VENV_DIR, Distribution, HealthyState, Project, RunResult, Source, Target
from miner.sandbox.base import BuildSpec, Healthy, Limits, Sandbox
from miner.sandbox.local import LocalBackend
from miner.validate import fix_network

CATALOGUE = load_catalogue()
ENV_VALUES = {"GREETER_MODE": "production", "GREETER_HOME": "/srv/greeter", "UNRELATED": "1"}

PROJECT_FILES = {
    "pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "greeter"
        version = "0.3.0"
        dependencies = ["six", "iniconfig"]

        [project.scripts]
        greet = "greeter.cli:main"

        [tool.setuptools]
        packages = ["greeter"]
        """,
    "setup.cfg": "[flake8]\nmax-line-length = 120\n",
    "tox.ini": "[tox]\nenvlist = py311\n",
    "README.md": """\
        # greeter

        See words.csv. The defaults of conf/ and of the environment:

            port = 8080        # where the server listens
            GREETER_MODE=production
            GREETER_HOME=/srv/greeter
        """,
    ".env.example": "GREETER_HOME=/srv/greeter\n",
    "greeter/__init__.py": """\
        import json
        import os
        import tomllib
        import configparser
        from pathlib import Path

        import iniconfig
        import six

        ROOT = Path(__file__).resolve().parent.parent


        def mode():
            return os.environ["GREETER_MODE"]


        def home():
            return os.getenv("GREETER_HOME", "")


        def debug():
            return "GREETER_DEBUG" in os.environ


        def words():
            # unused.dat is only named in this comment, and swords.csv only contains the name
            return (ROOT / "data" / "words.csv").read_text(encoding="utf-8").splitlines()


        def names():
            return (ROOT / "data" / "names.txt").read_text(encoding="utf-8").split()


        def settings():
            app = json.loads((ROOT / "conf" / "app.json").read_text())
            app["port"] + 1
            return app
        """,
    "greeter/cli.py": """\
        import greeter


        def main():
            print("hello", greeter.mode())
        """,
    "tests/test_greeter.py": """\
        from pathlib import Path

        import greeter


        def test_sample():
            assert (Path(__file__).parent / "fixtures" / "sample.txt").read_text().startswith("alpha")


        def test_words():
            assert greeter.words()[0] == "word,count"
        """,
    "tests/fixtures/sample.txt": "alpha\nbeta\ngamma\n",
    "tests/fixtures/settings.json": '{"not": "a config outside tests"}\n',
    "data/words.csv": "word,count\nhello,3\nworld,5\nünïcode,7\n",
    "data/names.txt": "alice\nbob\ncarol\n",
    "data/unused.dat": "nobody reads this file\n",
    "data/s.csv": "a name that is a substring of another\n",
    ".hidden.json": '{"a": 1}\n',
    "conf/settings.yaml": """\
        # greeter settings
        name: greeter
        server:
          port: 8080
          debug: false
          hosts:
            - a.example
            - b.example
        retries: 3
        """,
    "conf/app.ini": """\
        [server]
        port = 8080
        debug = no
        hosts =
            a.example
            b.example

        [client]
        retries = 3
        name = greeter
        """,
    "conf/app.toml": """\
        name = "greeter"
        tags = ["a", "b"]

        [server]
        port = 8080  # the listening port
        debug = false
        """,
    "conf/app.json": '{\n  "name": "greeter",\n  "port": 8080,\n  "debug": false,\n  "tags": ["a", "b"]\n}\n',
}


WATCHED = (PROJECT_DIR, VENV_DIR, ENV_FILE)  # what a break may change and a fix must restore


@dataclass
class World:
    """The project on the host (what the target enumeration reads), its healthy state, and the
    built sandbox every end-to-end test forks, with a snapshot of its files."""

    project: Project
    healthy: HealthyState
    backend: LocalBackend
    env: Healthy
    files: dict[str, tuple]

    @property
    def root(self) -> Path:
        return self.project.path


def write_project(root: Path) -> None:
    for rel, text in PROJECT_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def snapshot(box: Sandbox) -> dict[str, tuple]:
    """Every file of the sandbox's project, venv and env file: (mode, content hash) or ("link", target).

    Bytecode caches are left out (imports write them); a file a break made unreadable has no hash.
    """
    roots = " ".join(WATCHED)
    listing = box.run(f"find {roots} -xdev -name __pycache__ -prune -o -type l -printf 'link\\t%l\\t%p\\n' "
                      f"-o -type f -printf '%m\\t\\t%p\\n'", timeout=120)
    assert listing.exit_code == 0, listing.output[-2000:]
    hashes = hash_tree(box, list(WATCHED))
    state = {}
    for line in listing.output.splitlines():
        kind, link, path = line.split("\t", 2)
        state[path] = ("link", link) if kind == "link" else (int(kind, 8), hashes.get(path, "unreadable"))
    return state


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    base = tmp_path_factory.mktemp("world")
    root = base / "project"
    write_project(root)
    project = Project(source=Source(raw=str(root), kind="local", location=str(root)), repo=str(root),
                      commit="0" * 40, path=root)
    backend = LocalBackend()
    spec = BuildSpec(python=sys.executable, install_script="pip install -q six iniconfig .", env=dict(ENV_VALUES),
                     limits=Limits(timeout=600))
    env = backend.build(project, spec, base / "work")
    with backend.fork(env) as box:
        site_packages, inventory, _ = collect_inventory(box)
        files = snapshot(box)
    healthy = HealthyState(
        repo=project.repo, commit=project.commit, backend="local", test_command="python -m pytest",
        outcomes={"tests/test_greeter.py::test_sample": "passed", "tests/test_greeter.py::test_words": "passed"},
        distributions={d.name: d.version for d in inventory}, inventory=inventory, project_dists=["greeter"],
        protected=sorted(rel for rel in PROJECT_FILES if rel.endswith(".py")), env=dict(ENV_VALUES),
        site_packages=site_packages,
    )
    return World(project=project, healthy=healthy, backend=backend, env=env, files=files)


@pytest.fixture
def box(world: World) -> Iterator[Sandbox]:
    """A fresh fork of the world's sandbox."""
    with world.backend.fork(world.env) as sandbox:
        yield sandbox


def by_key(world: World) -> dict[str, Target]:
    return {t.key: t for t in enumerate_targets(world.project, world.healthy)}


# ---------------------------------------------------------------- enumeration


def test_targets_of_every_kind(world):
    targets = by_key(world)
    assert {"distribution:six", "distribution:iniconfig", "distribution:greeter"} <= set(targets)
    assert not {"distribution:pip", "distribution:setuptools"} & set(targets)
    assert targets["distribution:greeter"].attrs["project_own"] is True
    assert targets["distribution:six"].attrs == {**targets["distribution:six"].attrs, "project_own": False,
                                                 "depth": 1}
    assert targets["module:six"].path == "six.py" and targets["module:six"].attrs["package"] is False
    assert targets["module:iniconfig"].path == "iniconfig/__init__.py"
    assert "module:greeter" not in targets  # the project's own code is protected, not a dependency
    assert targets["script:greet"].attrs == {"dist": "greeter", "entry": "greeter.cli:main", "project_own": True}
    configs = {t.name: t.attrs["format"] for t in targets.values() if t.kind == "config"}
    assert configs == {"conf/settings.yaml": "yaml", "conf/app.ini": "ini", "conf/app.toml": "toml",
                       "conf/app.json": "json"}
    data = {t.name for t in targets.values() if t.kind == "data"}
    # named in code; README/unused.dat are not, and the tests' own data is the judge (rule 7)
    assert data == {"data/words.csv", "data/names.txt"}
    assert {t.name: t.attrs["value"] for t in targets.values() if t.kind == "envvar"} == {
        "GREETER_MODE": "production", "GREETER_HOME": "/srv/greeter"}
    words = targets["data:data/words.csv"].attrs
    assert words["is_text"] and not words["has_crlf"] and words["mode"] == "644"
    assert words["size"] == len(PROJECT_FILES["data/words.csv"].encode())


def test_no_protected_or_packaging_file_is_a_target(world):
    names = {t.name for t in enumerate_targets(world.project, world.healthy) if t.kind in ("config", "data")}
    assert not names & set(world.healthy.protected)
    assert not names & {"pyproject.toml", "setup.cfg", "tox.ini", "README.md", "tests/fixtures/settings.json",
                        "tests/fixtures/sample.txt", "data/unused.dat", "data/s.csv", ".hidden.json"}


def test_code_facts_come_from_the_tree_sitter_parse(tmp_path):
    code = textwrap.dedent("""\
        import os
        from os import environ, getenv
        NAME = "H"
        a = os.environ["A"]
        b = os.environ.get("B", "x")
        c = os.getenv("C")
        d = getenv("D")
        e = "E" in os.environ
        f = environ.setdefault("F", "1")
        g = os.environ.get(name)
        h = os.getenv(NAME)
        os.environ["SET_ONLY"] = "1"
        text = "os.environ['NOT_CODE']"
        table = open(os.path.join(here, "tables", "rates.csv"))
        """)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(code)
    facts = code_facts(tmp_path)
    assert facts.env_reads == {"A", "B", "C", "D", "E", "F", "H"}  # a module constant names a variable too
    assert facts.mentions("rates.csv") and not facts.mentions("tables")
    assert "os.environ['NOT_CODE']" in facts.strings and "SET_ONLY" in facts.strings


def test_tooling_and_its_requirements_are_not_targets():
    def dist(name, requires=()):
        return Distribution(name=name, version="1.0", requires=list(requires))

    healthy = HealthyState(repo="r", commit="c", backend="local", test_command="pytest", outcomes={},
                           inventory=[dist("app", ["requests", "packaging"]), dist("requests", ["idna"]),
                                      dist("idna"), dist("packaging"), dist("pytest", ["pluggy", "packaging"]),
                                      dist("pluggy"), dist("pytest-cov", ["coverage"]), dist("coverage"),
                                      dist("pip"), dist("hypothesis", ["attrs"]), dist("attrs")],
                           project_dists=["app"])
    assert dependency_depths(healthy) == {"app": 0, "requests": 1, "idna": 2, "hypothesis": 1, "attrs": 2}


def test_preconditions():
    target = Target(kind="data", name="x.csv", attrs={"size": 10, "is_text": True, "format": "ini"})
    assert matches({}, target)
    assert matches({"is_text": True, "min_size": 10, "max_size": 10, "context": ["x"]}, target)
    assert matches({"format": ["ini", "toml"]}, target)
    assert not matches({"format": ["yaml"]}, target)
    assert not matches({"min_size": 11}, target)
    assert not matches({"has_crlf": False}, target)  # an attribute the target lacks fails


# ---------------------------------------------------------------- config edits


@pytest.mark.parametrize("rel, path", [
    ("conf/settings.yaml", ("server", "port")), ("conf/settings.yaml", ("server", "hosts")),
    ("conf/settings.yaml", ("retries",)), ("conf/app.ini", ("server", "hosts")), ("conf/app.ini", ("client", "name")),
    ("conf/app.toml", ("server", "port")), ("conf/app.toml", ("tags",)), ("conf/app.json", ("port",)),
])
def test_delete_key_keeps_the_rest(rel, path):
    fmt = {"yaml": "yaml", "ini": "ini", "toml": "toml", "json": "json"}[rel.rsplit(".", 1)[1]]
    text = textwrap.dedent(PROJECT_FILES[rel])
    edited = edit_config(fmt, text, path, delete=True)
    before, after = parse_config(fmt, text), parse_config(fmt, edited)
    node = before
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    assert after == before
    if fmt != "json":  # line edits keep comments and layout elsewhere
        assert len(edited.splitlines()) < len(text.splitlines())
        assert all(line in text.splitlines() for line in edited.splitlines())


@pytest.mark.parametrize("fmt, value, new", [
    ("yaml", 8080, "8080"), ("json", False, "false"), ("toml", ["a", "b"], "a,b"), ("yaml", "greeter", ["greeter"]),
    ("ini", "8080", "8080.5"), ("ini", "no", '"no"'), ("ini", "1.5", "1.5%"), ("ini", "greeter", None),
    ("json", {"a": 1}, None),
])
def test_retyped_values(fmt, value, new):
    assert retyped(fmt, value) == new


def test_retype_edits_one_line_and_parses():
    text = textwrap.dedent(PROJECT_FILES["conf/app.toml"])
    edited = edit_config("toml", text, ("server", "port"), value="8080")
    assert tomllib.loads(edited)["server"] == {"port": "8080", "debug": False}
    assert edited.count("\n") == text.count("\n")
    edited = edit_config("yaml", textwrap.dedent(PROJECT_FILES["conf/settings.yaml"]), ("server", "debug"),
                         value="false")
    assert yaml.safe_load(edited)["server"]["debug"] == "false"
    assert edited.startswith("# greeter settings\n")


def test_line_edits_are_one_line_or_nothing():
    text = "a = 1\nb = 2\nc = 3\n"
    assert line_edit(text, "a = 1\nc = 3\n") == (2, "b = 2", None)
    assert line_edit(text, "a = 1\nb = 2\n") == (3, "c = 3", None)
    assert line_edit(text, "a = 1\nb = '2'\nc = 3\n") == (2, "b = 2", "b = '2'")
    assert line_edit(text, "a = 1\nb = '2'\nc = '3'\n") is None  # two lines
    assert line_edit(text, "c = 3\n") is None
    assert line_edit(text.replace("\n", "\r\n"), "a = 1\r\nc = 3\r\n") is None  # CRLF: never edited


def test_older_release_and_wrong_values():
    assert older_release("2.3.0", ["2.3.1", "2.3.0", "2.2.0", "2.0.0", "1.1.1", "1.1.0", "0.1"]) == "1.1.1"
    assert older_release("1.17.0", ["1.17.0", "1.16.0", "0.9.2"]) == "0.9.2"
    assert older_release("1.2.3", ["1.2.0", "1.2.1"]) is None
    assert older_release("3.0", ["3.0rc1", "2.9.0b1", "2.8"]) == "2.8"
    assert wrong_value("true") == "false" and wrong_value("ON") == "OFF"
    assert wrong_value("8080") == "-1"
    assert wrong_value("/srv/greeter/") == "/srv/old-greeter"
    assert wrong_value("production") not in ("production", "")
    assert wrong_value("ab") == "ab-x"


def test_stated_values_in_prose_assignments_and_env_files():
    readme = "- `WEATHER_UNITS` (`metric` by default, or `imperial`)\n- `CURRENCY` (default `EUR`)\n"
    assert stated_values(readme, "WEATHER_UNITS") == ["metric"] and stated_values(readme, "CURRENCY") == ["EUR"]
    assert stated_values("export APP='prod'\nAPP = test # note\n", "APP") == ["prod", "test"]
    assert stated_values("MY_APP=x and $APP=y and XAPP=z", "APP") == []  # other names, a shell expansion


def test_stated_value_is_where_the_project_says_it(world, tmp_path):
    """The README's prose, then an example env file; a code default when no document states it; and
    no evidence for a value nothing states (a target without it yields no env candidate)."""
    facts = code_facts(world.root)
    assert stated_value(world.root, facts, "GREETER_MODE", "production") == (
        "README.md", "README.md states GREETER_MODE=production")
    assert stated_value(world.root, facts, "GREETER_HOME", "/srv/greeter")[0] == ".env.example"
    assert stated_value(world.root, facts, "GREETER_MODE", "staging") is None
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "units.py").write_text('import os\nDEFAULT = "km"\nUNITS = os.getenv("UNITS", DEFAULT)\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_units.py").write_text('import os\nos.environ.get("MODE", "fast")\n')
    facts = code_facts(tmp_path)
    assert stated_value(tmp_path, facts, "UNITS", "km") == (
        "app/units.py", "app/units.py reads UNITS with the default 'km'")
    assert stated_value(tmp_path, facts, "MODE", "fast") is None  # the tests are no statement of the project's


def test_env_types_need_a_stated_value(world):
    target = Target(kind="envvar", name="UNRELATED", attrs={"value": "1", "value_kind": "int"})
    for type_id in ("env/unset-var", "env/wrong-var"):  # no statement: an unrecoverable pair, recorded, never run
        unstated = ProceduralInverter([CATALOGUE[type_id]]).apply(world.project, world.healthy, target,
                                                                 CATALOGUE[type_id])
        assert unstated.evidence == [] and "no project file states UNRELATED=1" in unstated.no_evidence
    stated = by_key(world)["envvar:GREETER_MODE"]
    inversion = ProceduralInverter([CATALOGUE["env/wrong-var"]]).apply(world.project, world.healthy, stated,
                                                                      CATALOGUE["env/wrong-var"])
    assert [str(e) for e in inversion.evidence] == ["project-files: README.md states GREETER_MODE=production"]


def test_previous_and_conflicting_releases():
    assert previous_release("1.17.0", ["1.17.0", "1.16.0", "2.0.0rc1", "0.9"]) == "1.16.0"
    assert previous_release("1.0", ["1.0", "2.0"]) is None
    assert str(requirement_on("six >=1.5", "Six")) == ">=1.5"
    assert requirement_on("six", "six") is None and requirement_on("idna <4", "six") is None
    from packaging.specifiers import SpecifierSet

    assert violating_release("2.0", SpecifierSet("<3,>=2"), ["3.1", "3.0", "2.0", "1.9"]) == "3.0"  # upgrade too far
    assert violating_release("1.17.0", SpecifierSet(">=1.5"), ["1.17.0", "1.4.1", "1.0"]) == "1.4.1"
    assert violating_release("1.17.0", SpecifierSet(">=1.0"), ["1.17.0", "1.4.1"]) is None


def test_conflicting_version_when_one_requirer_names_the_target_twice(world):
    # pandas requires numpy under two markers: two specifier sets from one requirer (they do not sort)
    from miner.inverters.procedural import Job
    from miner.models import Distribution, Target
    import random

    inventory = [Distribution(name="numpy", version="2.0.0"),
                 Distribution(name="pandas", version="2.2", requirements=["numpy >=1.23.2", "numpy >=1.26.0"])]
    healthy = world.healthy.model_copy(update={"inventory": inventory})
    inverter = ProceduralInverter([], releases={"pypi": lambda name: ["2.0.0", "1.26.4", "1.22.0"]})
    job = Job(project=world.project, healthy=healthy, target=Target(kind="distribution", name="numpy"),
              rng=random.Random(0), base={"version": "2.0.0"})
    assert conflicting_version(inverter, job) == {"conflict_version": "1.22.0", "required_by": "pandas",
                                                 "specifier": ">=1.23.2"}


# ---------------------------------------------------------------- ordering


INDEX_PROVIDERS = {"bad_version", "previous_version", "conflicting_version"}  # they ask the package index


def no_index_types():
    return [t for t in CATALOGUE.values() if not INDEX_PROVIDERS & set(t.preconditions.get("context", []))]


def order(inversions):
    return [(i.type_id, i.target.key) for i in inversions]


def test_order_is_deterministic_per_seed(world):
    types = no_index_types()
    first = ProceduralInverter(types, seed=0).candidates(world.project, world.healthy)
    again = ProceduralInverter(types, seed=0).candidates(world.project, world.healthy)
    other = ProceduralInverter(types, seed=1).candidates(world.project, world.healthy)
    assert order(first) == order(again)
    assert [i.break_script for i in first] == [i.break_script for i in again]
    assert order(first) != order(other)
    assert sorted(order(first)) == sorted(order(other))
    assert len(set(order(first))) == len(first) > 40


def test_small_budget_spreads_over_families(world):
    inverter = ProceduralInverter(no_index_types(), seed=3)
    everything = inverter.candidates(world.project, world.healthy)
    families = {i.family for i in everything if not i.no_evidence}
    assert {"deps", "config", "data", "fs", "env", "virtualenv"} <= families
    first = ProceduralInverter(no_index_types(), seed=3).candidates(world.project, world.healthy,
                                                                   budget=len(families))
    assert order(first) == order(everything)[:len(first)]
    runnable = [i for i in first if not i.no_evidence]  # unrecoverable pairs are kept but take no budget
    assert len(runnable) == len(families)
    assert {i.family for i in runnable} == families


def test_given_targets_keep_their_order(world):
    targets = by_key(world)
    ranked = [targets["data:data/names.txt"], targets["data:data/words.csv"]]
    inversions = ProceduralInverter(select_types(CATALOGUE, "data"), seed=0).candidates(
        world.project, world.healthy, targets=ranked)
    keys = [i.target.key for i in inversions]
    assert keys == sorted(keys, key=lambda k: k != "data:data/names.txt")
    assert keys[0] == "data:data/names.txt" and keys[-1] == "data:data/words.csv"
    shuffled = ProceduralInverter(select_types(CATALOGUE, "data"), seed=0).candidates(
        world.project, world.healthy, targets=ranked, shuffle=True)
    assert sorted(order(shuffled)) == sorted(order(inversions))


def test_types_of_other_backends_are_skipped(world):
    docker_only = CATALOGUE["data/crlf"].model_copy(update={"backends": ["docker"]})
    assert ProceduralInverter([docker_only]).candidates(world.project, world.healthy) == []


def test_config_context_prefers_keys_the_code_names(world):
    target = by_key(world)["config:conf/app.json"]
    inversion = ProceduralInverter([CATALOGUE["config/missing-key"]]).apply(
        world.project, world.healthy, target, CATALOGUE["config/missing-key"])
    assert "key port " in inversion.summary  # "port" is the only key greeter's code names
    [evidence] = inversion.evidence  # README.md and the other configs state it
    assert evidence.kind == "project-files" and evidence.detail.startswith("README.md, conf/app.ini")
    assert evidence.detail.endswith("state(s) port = 8080")


def test_a_pair_without_evidence_is_kept_as_unrecoverable(world):
    """The world is a folder (no published source): a deleted data file cannot be recovered, so the
    pair comes back with no evidence and no scripts, to be recorded (never run); a config key no
    project file states is unrecoverable too, while a stated one is not."""
    targets = by_key(world)
    deleted = ProceduralInverter([CATALOGUE["fs/deleted"]]).apply(
        world.project, world.healthy, targets["data:data/words.csv"], CATALOGUE["fs/deleted"])
    assert deleted.evidence == [] and deleted.break_script == deleted.fix_script == ""
    assert "local source has no published source" in deleted.no_evidence
    settings = targets["config:conf/settings.yaml"]
    keys = ProceduralInverter([CATALOGUE["config/missing-key"]]).context(
        world.project, world.healthy, settings, CATALOGUE["config/missing-key"])
    assert keys["key"] == "server.port" and "README.md" in keys["stated_in"]
    unstated = settings.model_copy(update={"name": "conf/other.yaml", "path": "conf/other.yaml"})
    (world.root / "conf" / "other.yaml").write_text("mode: fast\nlevel: 3\n")
    try:
        other = ProceduralInverter([CATALOGUE["config/missing-key"]]).apply(
            world.project, world.healthy, unstated, CATALOGUE["config/missing-key"])
    finally:
        (world.root / "conf" / "other.yaml").unlink()
    assert other.evidence == [] and "no project file but conf/other.yaml states" in other.no_evidence


# ---------------------------------------------------------------- break and fix, for real

E2E_TARGETS = {
    "distribution": ["iniconfig"],
    "module": ["six", "iniconfig"],
    "config": ["conf/settings.yaml", "conf/app.ini", "conf/app.toml", "conf/app.json"],
    "data": ["data/words.csv", "data/names.txt"],
    "script": ["greet"],
    "envvar": ["GREETER_MODE", "GREETER_HOME"],
}
# The types of issue 12 are validated on fixtures/stocksync, which has their targets (test_catalogue_types).
# (an image's variables are not the local fixture's: tests/test_node_service.py tries those types)
CASES = [(t.id, name) for t in CATALOGUE.values() for name in E2E_TARGETS.get(t.target, [])
         if t.id not in LOCAL_CASES and t.preconditions.get("where") != "image"]


def python_code(box: Sandbox, code: str) -> RunResult:
    """Python run in the sandbox as the project's commands run (the environment file sourced)."""
    return box.run(f'"$MINER_PYTHON" -c {shlex.quote(code)}', timeout=60)


def module_check(world: World, box: Sandbox, module: str) -> RunResult:
    """Import a module the way the project would and require the real file from site-packages."""
    expected = f"{world.healthy.site_packages}/{by_key(world)[f'module:{module}'].path}"
    return python_code(box, f"import {module}; assert {module}.__file__ == {expected!r}, {module}.__file__")


def dist_check(world: World, box: Sandbox, name: str) -> RunResult:
    version = world.healthy.distributions[name]
    return python_code(box, f"import importlib.metadata as m, {name}; v = m.version({name!r}); "
                            f"assert v == {version!r}, v")


def env_value(box: Sandbox, name: str) -> str | None:
    out = python_code(box, f"import os, json; print(json.dumps(os.environ.get({name!r})))")
    return json.loads(out.output.strip().splitlines()[-1])


def path_state(box: Sandbox, path: str) -> dict[str, str]:
    """What a program inside sees of a path: exists, is a link, its mode, whether it can be read."""
    quoted = shlex.quote(path)
    out = box.run(f"p={quoted}; for t in 'test -e $p' 'test -L $p' 'cat -- $p'; do "
                  "if eval \"$t\" >/dev/null 2>&1; then echo 1; else echo 0; fi; done; stat -c %a -- $p 2>/dev/null "
                  "|| echo -", timeout=60)
    exists, link, readable, mode = out.output.split()[-4:]
    return {"exists": exists == "1", "link": link == "1", "readable": readable == "1", "mode": mode}


def assert_broken(world: World, box: Sandbox, type_id: str, target: Target, context) -> None:
    """The break did what the type says, observed the way a program inside the sandbox sees it."""
    kind = target.kind
    if kind == "module":
        result = module_check(world, box, target.name)
        assert result.exit_code != 0, f"{type_id} left {target.name} importable: {result.output}"
    elif kind == "distribution":
        assert dist_check(world, box, target.name).exit_code != 0
    elif kind == "script":
        assert box.run(f"test -x {VENV_DIR}/bin/{target.name}").exit_code != 0
        assert box.run(f"{target.name} >/dev/null").exit_code == 126  # found but not executable
    elif kind == "envvar":
        assert env_value(box, target.name) != world.healthy.env[target.name]
    else:
        path = f"{PROJECT_DIR}/{target.path}"
        original = parse_original(world, target)
        if type_id.startswith("fs/"):
            return assert_fs_broken(type_id, path_state(box, path), context)
        data = box.read(path)
        assert data is not None and data != original
        if type_id == "config/syntax-error":
            with pytest.raises(Exception):
                parse_config(target.attrs["format"], data.decode())
        elif type_id in ("config/missing-key", "config/wrong-type"):
            fmt = target.attrs["format"]
            before, after = parse_config(fmt, original.decode()), parse_config(fmt, data.decode())
            keys = context["key"].split(".")
            for part in keys[:-1]:
                before, after = before[part], after[part]
            if type_id == "config/missing-key":
                assert keys[-1] in before and keys[-1] not in after
            else:
                assert type(before[keys[-1]]) is not type(after[keys[-1]]) or fmt == "ini"
                assert before[keys[-1]] != after[keys[-1]]
        elif type_id == "data/truncate":
            assert data == original[: len(original) // 2]
        elif type_id in ("data/corrupt-bytes", "data/wrong-encoding"):
            with pytest.raises(UnicodeDecodeError):
                data.decode("utf-8")
        elif type_id == "data/crlf":
            assert data == original.replace(b"\n", b"\r\n")


def assert_fs_broken(type_id: str, seen: dict[str, str], context) -> None:
    if type_id in ("fs/unreadable", "fs/unreadable-config"):
        # the sandbox drops every capability, root's CAP_DAC_OVERRIDE included: unreadable inside
        assert seen["mode"] == "0" and seen["exists"] and not seen["readable"]
    elif type_id == "fs/broken-symlink":
        assert seen["link"] and not seen["exists"]
    elif type_id == "fs/deleted":
        assert not seen["exists"] and not seen["link"]
    else:
        assert seen["mode"] != format(int(context["mode"], 8), "o") or not seen["exists"]


def parse_original(world: World, target: Target) -> bytes:
    return textwrap.dedent(PROJECT_FILES[target.path]).encode()


def no_copy_left(before: dict[str, tuple], after: dict[str, tuple]) -> None:
    """Rule 6: content a break changed or removed does not reappear at a new or changed path.

    Content that also sits at a path the break left alone (an INSTALLER file, an empty file)
    proves nothing either way and is ignored, and so is the metadata pip writes for another
    release of the same distribution (its top_level.txt names the same module).
    """
    def digest(entry: tuple | None) -> str | None:
        return entry[1] if entry and entry[0] != "link" else None

    moved = {p for p in after if digest(after[p]) != digest(before.get(p))}
    kept = {digest(h) for p, h in before.items() if p not in moved and after.get(p) == h}
    lost = {digest(h) for p, h in before.items() if digest(h) and digest(after.get(p)) != digest(h)}
    leaked = {p for p in moved if digest(after[p]) in lost - kept and ".dist-info/" not in p}
    assert not leaked, f"a copy of a changed file is left behind: {sorted(leaked)}"


@pytest.mark.slow  # every catalogue type applied and undone for real: a few minutes
@pytest.mark.parametrize("type_id, name", CASES, ids=[f"{t}:{n}" for t, n in CASES])
def test_break_then_fix_restores_every_byte(world, box, type_id, name):
    itype = CATALOGUE[type_id]
    targets = by_key(world)
    target = targets[f"{itype.target}:{name}"]
    assert matches(itype.preconditions, target), f"{type_id} does not apply to {target.key}"
    inverter = ProceduralInverter([itype], seed=0)
    inversion = inverter.apply(world.project, world.healthy, target, itype)
    assert inversion is not None, f"no context for {type_id} on {target.key}"
    if "published-source" in {e.kind for e in itype.evidence}:  # a folder has none: rule 8
        assert inversion.no_evidence and not inversion.evidence
        return
    assert inversion.evidence and not inversion.no_evidence, inversion.no_evidence
    context = inverter.context(world.project, world.healthy, target, itype)

    if target.kind == "module":
        assert module_check(world, box, name).exit_code == 0
    broke = box.run(inversion.break_script, network=bool(itype.network.get("break")), timeout=300)
    assert broke.exit_code == 0, broke.output
    broken = snapshot(box)
    assert broken != world.files
    assert_broken(world, box, type_id, target, context)
    no_copy_left(world.files, broken)
    for rel in world.healthy.protected:  # rule 3
        assert broken[f"{PROJECT_DIR}/{rel}"] == world.files[f"{PROJECT_DIR}/{rel}"]
    fixed = box.run(inversion.fix_script, network=fix_network(inversion), timeout=300)
    assert fixed.exit_code == 0, fixed.output
    after = snapshot(box)
    assert {p: h for p, h in after.items() if h != world.files.get(p)} == {}
    assert set(after) == set(world.files)
    if target.kind == "module":
        assert module_check(world, box, name).exit_code == 0
    if target.kind == "distribution":
        assert dist_check(world, box, name).exit_code == 0
    assert box.run("greet").output == "hello production\n"
