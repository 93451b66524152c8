"""Published-source evidence for any registry's sources: a break type's `published_source` context
comes from the source's registry (miner.ecosystems.base.Published): a PyPI sdist, an npm tarball;
the exported task's network route reaches that registry.

(slow: the registries) the fetch lines a fix runs leave the project's own files under "$D".
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from miner import ecosystems
from miner.catalogue import load_catalogue, render
from miner.export.common import network_route
from miner.models import Evidence, Project, Source, Target, Task
from miner.sources import fetch, parse_source


def project_of(raw: str, path: Path) -> Project:
    source = parse_source(raw, Path.cwd())
    return Project(source=source, repo=raw, commit="0" * 40, path=path)


def task_of(raw: str, kind: str = "published-source") -> Task:
    source = parse_source(raw, Path.cwd())
    return Task.model_construct(source=source, evidence=[Evidence(kind=kind, detail="x")])


def test_each_registry_names_its_published_source_and_a_folder_has_none(tmp_path: Path) -> None:
    pypi = ecosystems.published_source(project_of("pypi:textkit==1.2.0", tmp_path))
    npm = ecosystems.published_source(project_of("npm:statuses@2.0.1", tmp_path))
    assert pypi["published"] == "textkit==1.2.0" and pypi["published_holds"] == "its sdist"
    assert "pip download" in pypi["published_fetch"] and pypi["sdist_name"] == "textkit"
    assert npm["published"] == "statuses@2.0.1" and npm["published_holds"] == "its registry tarball"
    assert "npm pack statuses@2.0.1" in npm["published_fetch"] and "sdist_name" not in npm
    assert ecosystems.published_source(project_of(str(tmp_path), tmp_path)) is None


def test_a_published_source_type_renders_for_an_npm_source(tmp_path: Path) -> None:
    itype = load_catalogue()["data/truncate"]
    target = Target(kind="data", name="codes.json", path="codes.json", attrs={"format": "json"})
    context = {"size": 1000, **ecosystems.published_source(project_of("npm:statuses@2.0.1", tmp_path))}
    rendered = render(itype, target, context)
    assert "npm pack statuses@2.0.1" in rendered.fix_script and "pip download" not in rendered.fix_script
    assert rendered.evidence[0].detail == "statuses@2.0.1 (its registry tarball holds codes.json)"


def test_the_route_of_a_published_source_task_is_its_registrys() -> None:
    assert network_route(task_of("npm:statuses@2.0.1")).hosts == ("registry.npmjs.org",)
    assert network_route(task_of("pypi:textkit==1.2.0")).hosts == ("pypi.org", "files.pythonhosted.org")
    mirror = {"PIP_INDEX_URL": "http://mirror.example/simple"}
    assert network_route(task_of("pypi:textkit==1.2.0"), mirror).hosts == ("mirror.example",)
    assert network_route(task_of("npm:statuses@2.0.1", "package-index")).hosts == ("pypi.org", "files.pythonhosted.org")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm")
def test_the_fetch_lines_leave_the_npm_sources_own_files(tmp_path: Path) -> None:
    """What a fix runs (npm pack from the registry) holds the files miner's source fetch unpacked."""
    project = fetch(parse_source("npm:qs@6.17.1", tmp_path), tmp_path / "cache")
    context = ecosystems.published_source(project)
    folder = tmp_path / "d"
    folder.mkdir()
    script = f'set -euo pipefail\nD={folder}\ncd "$D"\n{context["published_fetch"]}\ncat "$D"/*/package.json'
    run = subprocess.run(["bash", "-c", script], capture_output=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == (project.path / "package.json").read_bytes()
