"""miner.inverters.system: targets beneath the project, a pure function of a backend's observation.

No engine needed: the observations are shaped like those of miner.sandbox.docker.observe (the
Docker tests check that a real container gives such an observation).
"""

from __future__ import annotations

import json
from pathlib import Path

from miner.catalogue import load_catalogue, render
from miner.inverters.system import targets_beneath, service_targets, stated_in, system_targets


def observation() -> dict:
    lib = {"soname": "libsqlite3.so.0", "linked": "/lib/x86_64-linux-gnu/libsqlite3.so.0",
           "path": "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6", "used_by": ["/x/_sqlite3.so"],
           "modules": ["_sqlite3"], "package": "libsqlite3-0:amd64"}
    core = {"soname": "libc.so.6", "linked": "/lib/libc.so.6", "path": "/usr/lib/libc.so.6",
            "used_by": ["/x/_sqlite3.so", "interpreter"], "modules": ["_sqlite3"], "package": "libc6:amd64"}
    apt = {"soname": "liblzma.so.5", "linked": "/lib/liblzma.so.5", "path": "/usr/lib/liblzma.so.5.4.1",
           "used_by": ["/x/_lzma.so"], "modules": ["_lzma"], "package": "liblzma5:amd64"}
    return {
        "libraries": {"libsqlite3.so.0": lib, "libc.so.6": core, "liblzma.so.5": apt},
        "packages": {"libsqlite3-0:amd64": {"name": "libsqlite3-0:amd64", "version": "3.40.1-2+deb12u2",
                                            "libraries": ["libsqlite3.so.0"]},
                     "libc6:amd64": {"name": "libc6:amd64", "version": "2.36-9", "libraries": ["libc.so.6"]},
                     "liblzma5:amd64": {"name": "liblzma5:amd64", "version": "5.4.1-1", "libraries": ["liblzma.so.5"]}},
        "extensions": {"interpreter": {"module": None, "libraries": ["libc.so.6"]}},
        "system": {
            "python_symlink": {"path": "/usr/bin/python3", "target": "python3.11", "exists": True,
                               "package": "python3-minimal", "version": "3.11.2-1+b1"},
            "venv_python": {"path": "/sandbox/venv/bin/python", "target": "python3", "exists": True,
                            "package": None, "version": None},
            "ca_bundle": {"path": "/etc/ssl/certs/ca-certificates.crt", "target": None, "exists": True,
                          "package": None, "version": None},
            "locale": {"path": "/usr/lib/locale/C.utf8/LC_CTYPE", "target": None, "exists": True,
                       "package": "libc-bin", "version": "2.36-9+deb12u14"},
        },
        "zones": ["Europe/Paris"], "zone_packages": {"Europe/Paris": {"package": "tzdata", "version": "2026b-0"}},
        "dpkg": True, "tools": {"apt-get": True, "dpkg-query": True, "update-ca-certificates": True},
        "recovery_libraries": ["liblzma.so.5", "libc.so.6"], "loaded": [], "service": None,
    }


def test_system_targets_carry_their_evidence_and_no_copy():
    targets = {t.key: t for t in system_targets(observation())}
    assert set(targets) == {"syslib:libsqlite3.so.0", "debpkg:libsqlite3-0", "system:python-symlink",
                            "system:venv-python", "system:ca-bundle", "system:locale:C.utf8",
                            "system:zoneinfo:Europe/Paris"}
    sqlite = targets["syslib:libsqlite3.so.0"].attrs
    assert (sqlite["package"], sqlite["version"], sqlite["evidence"]) == (
        "libsqlite3-0:amd64", "3.40.1-2+deb12u2", "debian-archive")
    assert targets["system:locale:C.utf8"].attrs["package"] == "libc-bin"
    assert targets["system:zoneinfo:Europe/Paris"].attrs["version"] == "2026b-0"
    assert targets["system:python-symlink"].attrs["evidence"] == "reversible"
    assert "b64" not in json.dumps([t.model_dump() for t in targets.values()])


def test_libraries_the_recovery_tools_need_and_unowned_files_are_not_targets():
    obs = observation()
    assert not any(t.name == "liblzma.so.5" for t in system_targets(obs))  # apt-get needs it to repair
    obs["libraries"]["libsqlite3.so.0"]["package"] = None  # a library no package installed: no evidence
    obs["system"]["locale"]["package"] = None
    kinds = {t.key for t in system_targets(obs)}
    assert "syslib:libsqlite3.so.0" not in kinds and "debpkg:libsqlite3-0" not in kinds
    assert "system:locale:C.utf8" not in kinds


def test_without_apt_nothing_comes_from_the_archive():
    obs = observation()
    obs["tools"]["apt-get"] = False
    obs["tools"]["update-ca-certificates"] = False
    keys = {t.key for t in system_targets(obs)}
    assert keys == {"system:python-symlink", "system:venv-python"}
    assert system_targets(None) == [] and targets_beneath(None, Path("/")) == []


def service_observation() -> dict:
    config = [
        {"path": "service.ini", "line": 3, "key": "port", "value": "8000", "answered": False},
        {"path": "service.ini", "line": 6, "key": "message", "value": "Hello", "answered": True},
        {"path": "service.ini", "line": 7, "key": "name", "value": "world", "answered": True},
        {"path": "service.ini", "line": 2, "key": "host", "value": "0.0.0.0", "answered": False},
        {"path": "tests/fixture.ini", "line": 1, "key": "port", "value": "8000", "answered": False},
    ]
    imports = [
        {"path": "/usr/local/lib/python3.11/dist-packages/six.py", "module": "six", "debian": None,
         "python": {"dist": "six", "version": "1.17.0", "installer": "pip", "python": "/usr/bin/python3.11",
                    "pip": True}},
        {"path": "/usr/lib/python3/dist-packages/yaml/__init__.py", "module": "yaml",
         "debian": {"package": "python3-yaml", "version": "6.0-3"}, "python": None},
        {"path": "/usr/lib/python3/dist-packages/yaml/reader.py", "module": "yaml.reader",
         "debian": {"package": "python3-yaml", "version": "6.0-3"}, "python": None},
        {"path": "/opt/vendored/thing.py", "module": "thing", "debian": None,
         "python": {"dist": "thing", "version": "1", "installer": "", "python": "/usr/bin/python3", "pip": True}},
    ]
    return {"service": {"ports": [8000], "config": config, "imports": imports}}


def test_service_targets_need_evidence(tmp_path: Path):
    (tmp_path / "service.ini").write_text("[server]\nhost = 0.0.0.0\nport = 8000\n")
    (tmp_path / "README.md").write_text("Configure `message = Hello` (the default greeting).\n")
    targets = {t.key: t for t in service_targets(service_observation(), tmp_path, ["tests/test_app.py"])}
    assert set(targets) == {"service:port:service.ini:port", "service:value:service.ini:message",
                            "service:dependency:six", "service:dependency:yaml"}
    value = targets["service:value:service.ini:message"].attrs
    assert (value["stated_in"], value["new_value"], value["evidence"]) == (["README.md"], "Hlelo", "project-files")
    assert targets["service:port:service.ini:port"].attrs["new_value"] == "8001"
    six = targets["service:dependency:six"].attrs
    assert (six["dist"], six["version"], six["evidence"]) == ("six", "1.17.0", "package-index")
    assert targets["service:dependency:yaml"].attrs["evidence"] == "debian-archive"


def test_stated_in_wants_the_key_and_the_value_on_one_line(tmp_path: Path):
    (tmp_path / "app.ini").write_text("message = Hello\n")
    (tmp_path / "docs.md").write_text("Say Hello.\nThe message is configurable.\n")
    (tmp_path / "example.ini").write_text("message=Hello\n")
    assert stated_in(tmp_path, "message", "Hello", exclude="app.ini") == ["example.ini"]
    assert stated_in(tmp_path, "message", "Hell", exclude="app.ini") == []


def test_catalogue_fixes_recover_from_the_evidence_only():
    """Every system and service fix renders without an embedded original: the archive at the
    recorded version, the index at the recorded version, or a short literal the evidence names."""
    catalogue = load_catalogue()
    obs = observation() | service_observation()
    root = Path(__file__).resolve().parent.parent / "fixtures" / "docker-service"
    targets = system_targets(obs) + service_targets(obs, root)
    rendered = 0
    for itype in (t for t in catalogue.values() if t.family in ("system", "service")):
        for target in targets:
            if target.kind != itype.target or any(target.attrs.get(k) != v for k, v in itype.preconditions.items()):
                continue
            fix = render(itype, target, {}).fix_script
            rendered += 1
            assert "b64" not in fix and len(fix.encode()) < 2048, (itype.id, target.key)
            if not itype.network.get("fix"):
                continue  # reversible: the fix undoes what the break added (a loader path, a link, a value)
            if target.attrs["evidence"] == "debian-archive":
                assert target.attrs["version"] in fix and "apt-get" in fix, itype.id
            else:
                assert f"{target.attrs['dist']}=={target.attrs['version']}" in fix, itype.id
    assert rendered >= 10


def test_stdlib_modules_and_their_extensions_are_targets_from_the_archive():
    obs = observation()
    obs["stdlib"] = {
        "sqlite3": {"path": "/usr/lib/python3.11/sqlite3/__init__.py", "package": "libpython3.11-stdlib:amd64",
                    "version": "3.11.2-6+deb12u8", "extensions": [
                        {"path": "/usr/lib/python3.11/lib-dynload/_sqlite3.cpython-311-x86_64-linux-gnu.so",
                         "package": "libpython3.11-stdlib:amd64", "version": "3.11.2-6+deb12u8"}]},
        "tomllib": {"path": "/usr/lib/python3.11/tomllib/__init__.py", "package": None, "version": None,
                    "extensions": []},
    }
    targets = {t.key: t for t in system_targets(obs)}
    module, extension = targets["system:stdlib:sqlite3"], targets["system:stdlib-extension:_sqlite3"]
    assert (module.attrs["role"], module.attrs["evidence"]) == ("stdlib-module", "debian-archive")
    assert extension.attrs["module"] == "sqlite3" and extension.path.endswith(".so")
    assert "system:stdlib:tomllib" not in targets  # no package owns it: no evidence
    catalogue = load_catalogue()
    inversion = render(catalogue["system/stdlib-extension-removed"], extension)
    assert "install --reinstall" in inversion.fix_script and "libpython3.11-stdlib:amd64" in inversion.fix_script
    obs["tools"]["apt-get"] = False
    assert not any(k.startswith("system:stdlib") for k in (t.key for t in system_targets(obs)))


def test_the_runner_probe_starts_pytest_as_the_project_does_without_its_code(tmp_path: Path, monkeypatch) -> None:
    # stdlib modules pytest needs in this project (its config file read with tomllib, a plugin its
    # addopts names) are the runner's, never targets; the project's own conftest imports stay targets
    import importlib.util

    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-p runner_helper"\n')
    (tmp_path / "runner_helper.py").write_text("import colorsys\n")
    (tmp_path / "conftest.py").write_text("import wave\n")
    spec = importlib.util.spec_from_file_location("system_inventory", Path("miner/assets/system_inventory.py"))
    inventory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inventory)
    monkeypatch.setattr(inventory, "PROJECT", str(tmp_path))
    assert inventory.pytest_config() == str(tmp_path / "pyproject.toml")
    names = inventory.runner_modules()
    assert {"tomllib", "colorsys", "pytest"} <= names
    assert "wave" not in names and "conftest" not in names
