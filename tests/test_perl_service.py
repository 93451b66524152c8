"""A real `miner crawl --backend docker` of fixtures/perl-service, a Perl HTTP service on three
ports (Debian's perl, core modules only) with no test suite: the third language, known only by
observation. Its checks are the derived probes (its three ports and its HEALTHCHECK); its tasks come
from what the traced service reads and what its image sets, and they export to Harbor folders whose
verifier judges the probes alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import crawl_fixture, run_miner

from miner.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PYTHON_FAMILIES = {"deps", "virtualenv"}


@pytest.fixture(scope="module")
def perl_crawl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return crawl_fixture(tmp_path_factory.mktemp("perl-crawl"), "perl-service", "--backend", "docker")


def test_five_tasks_in_three_families_from_what_the_service_reads(perl_crawl: Path) -> None:
    with Store(perl_crawl / "store", create=False) as store:
        tasks = store.list_tasks()
        healthy = store.healthy(store.projects()[0]["key"])
    assert healthy is not None
    assert {"probe::http::8080/", "probe::http::8081/", "probe::http::8082/"} <= set(healthy.outcomes)
    assert not [t for t in healthy.outcomes if not t.startswith("probe::")]  # no suite: the probes judge
    trace = healthy.system["trace"]
    assert {"config/tallyd.json", "data/prices.csv"} <= {e["rel"] for e in trace["files"] if e.get("rel")}
    assert trace["variables"]["TALLYD_CONFIG"] == "/srv/tallyd/config/tallyd.json"
    families = {t.family for t in tasks}
    assert len(tasks) >= 5 and len(families) >= 3, [t.type_id for t in tasks]
    assert not families & PYTHON_FAMILIES
    data = [t for t in tasks if t.family == "data"]
    assert data and all(t.f2p == ["probe::http::8080/"] for t in data)  # only the board reads the prices
    instruction = (perl_crawl / "store" / "tasks" / data[0].id / "instruction.md").read_text()
    assert instruction.startswith("# Make the project's checks pass again") and "pytest" not in instruction


def test_exported_probe_only_tasks_check_out(perl_crawl: Path, tmp_path: Path) -> None:
    """Harbor folders of a project without a suite: the healthy image runs no suite (none to run),
    and the verifier judges the probes: untouched 0, solved 1, the solver's view right."""
    from miner.check import check_tasks
    from miner.export import ExportOptions, export_tasks

    with Store(perl_crawl / "store", create=False) as store:
        tasks = store.list_tasks()
        by_family = {t.family: t for t in tasks}
        assert len(by_family) >= 3, [t.type_id for t in tasks]
        summary = export_tasks(store, list(by_family.values()), "harbor", tmp_path / "harbor",
                               ExportOptions(cache_dir=tmp_path / "cache"))
    assert not summary.failed, [(o.task_id, o.reason) for o in summary.failed]
    folders = [tmp_path / "harbor" / o.name for o in summary.outcomes]
    for result in check_tasks(folders, jobs=2):
        assert result.ok, f"{result.name}: {result.reason}\n{result.oracle.output[-2000:] if result.oracle else ''}"
