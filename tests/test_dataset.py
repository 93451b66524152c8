"""A Harbor dataset of exported tasks (`miner export --dataset`), its card, and its re-check
(`miner revalidate`): digests Harbor computes the same, a card that counts what the folder holds,
and a re-check that names what decayed (a changed base image, a folder edited since the export)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import HARBOR_VENV

from miner.cli import main
from miner.export.dataset import (
    CARD,
    MANIFEST,
    author_table,
    dataset_tasks,
    ignored_by_default,
    task_digest,
    write_dataset,
)
from miner.revalidate import changed_folders
from miner.store import Store

AUTHORS = [{"name": "Ada L", "email": "ada@example.org"}]


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def card_table(card: str, title: str) -> dict[str, int]:
    """The rows of the card's "### By TITLE" table."""
    section = card.split(f"### By {title}\n\n", 1)[1].split("\n\n", 1)[0]
    return {cells[0]: int(cells[1]) for line in section.splitlines()[2:]
            if (cells := [c.strip() for c in line.strip("|").split("|")])}


def test_authors_and_publishable_files() -> None:
    assert author_table("Ada L <ada@example.org>") == AUTHORS[0]
    assert author_table("miner") == {"name": "miner"}
    assert ignored_by_default("tests/originals/pkg/__pycache__/m.cpython-311.pyc")
    assert ignored_by_default("environment/notes.txt~") and not ignored_by_default("tests/spec.json")


@pytest.mark.docker
def test_the_dataset_lists_every_folder_by_digest_and_its_card_counts_them(harbor_export, tmp_path: Path) -> None:
    out = copy_tree(harbor_export.out, tmp_path / "ds")
    tasks = write_dataset(out, "acme/env-repair", "2.0.0", AUTHORS)
    data = tomllib.loads((out / MANIFEST).read_text())
    assert data["dataset"]["name"] == "acme/env-repair" and data["dataset"]["version"] == "2.0.0"
    assert data["dataset"]["authors"] == AUTHORS
    assert [t["name"] for t in data["tasks"]] == sorted(f"miner/{f.name}" for f in harbor_export.folders.values())
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", t["digest"]) for t in data["tasks"])
    assert data["metadata"]["miner_version"]
    card = (out / CARD).read_text()
    assert card.startswith("# acme/env-repair\n")
    families = card_table(card, "family")
    assert families == {family: 1 for family in harbor_export.folders}
    assert sum(card_table(card, "project").values()) == len(tasks)
    assert sum(card_table(card, "difficulty (guessed at mining)").values()) == len(tasks)
    assert all(t.name in card for t in tasks) and "Not re-checked since the export" in card
    assert changed_folders(out) == {}
    # an edit anywhere in a task folder changes its digest, and the re-check names the folder
    victim = dataset_tasks(out)[0]
    with open(victim.folder / "solution" / "solve.sh", "a") as handle:
        handle.write("# edited\n")
    assert task_digest(victim.folder) != data["tasks"][0]["digest"]
    assert list(changed_folders(out)) == [victim.name]
    assert "changed since the export" in changed_folders(out)[victim.name]


@pytest.mark.harbor
@pytest.mark.docker
def test_harbor_reads_the_dataset_and_computes_the_same_digests(harbor_export, harbor, tmp_path: Path) -> None:
    """Harbor's own `sync` recomputes every task's digest and finds none to update; its manifest
    model reads dataset.toml; its linter finds nothing in the task folders."""
    out = copy_tree(harbor_export.out, tmp_path / "ds")
    write_dataset(out, "acme/env-repair", "1.0.0", AUTHORS)
    listed = tomllib.loads((out / MANIFEST).read_text())["tasks"]
    done = harbor("sync", out, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Updated 0 digest(s)" in done.stdout, done.stdout
    assert tomllib.loads((out / MANIFEST).read_text())["tasks"] == listed
    python = HARBOR_VENV / "bin" / "python"
    read = subprocess.run([str(python), "-c", "import sys; from harbor.models.dataset.manifest import DatasetManifest; "
                           "m = DatasetManifest.from_toml_file(sys.argv[1]); print(m.dataset.name, len(m.tasks))",
                           str(out / MANIFEST)], capture_output=True, text=True, timeout=120)
    assert read.stdout.split() == ["acme/env-repair", str(len(listed))], read.stderr
    lint = harbor("lint", *sorted(t.folder for t in dataset_tasks(out)), "--json", timeout=300)
    assert json.loads(lint.stdout) == []
    # a task edited after the export: Harbor's digest moves as miner's does
    victim = dataset_tasks(out)[0]
    (victim.folder / "instruction.md").write_text("Make the tests pass.\n")
    assert harbor("sync", out, timeout=300).stdout.count("Updated 1 digest(s)") == 1
    assert tomllib.loads((out / MANIFEST).read_text())["tasks"][0]["digest"] == task_digest(victim.folder)


def export_args(out: Path, *more: str) -> list[str]:
    return ["export", "--format", "harbor", "--out", str(out), *more]


@pytest.mark.docker
def test_cli_export_dataset_grows_with_the_folder_and_refuses_bad_names(mined_store: Path, tmp_path: Path) -> None:
    from test_export import copy_store

    root = copy_store(mined_store, tmp_path / "store")
    with Store(root, create=False) as opened:
        first, second = sorted({t.family: t for t in opened.list_tasks()}.values(), key=lambda t: t.family)[:2]
    env = {"MINER_STORE": str(root), "COLUMNS": "200"}
    runner = CliRunner()
    out = tmp_path / "out"
    for args, why in ((["--dataset", "nope"], "ORG/NAME"), (["--dataset", "a/../b"], "ORG/NAME"),
                      (["--dataset", "a/b", "--format", "jsonl"], "--format harbor")):
        bad = runner.invoke(main, export_args(out, *args), env=env)
        assert bad.exit_code != 0 and why in bad.output, bad.output
    assert not out.exists()
    for task in (first, second):
        done = runner.invoke(main, export_args(out, "--type", task.type_id, "--repo", task.repo, "--limit", "1",
                                               "--dataset", "acme/env", "--author", "Ada L <ada@example.org>",
                                               "--task-version", "0.3.0"), env=env)
        assert done.exit_code == 0, done.output
        assert "dataset acme/env" in done.output
    data = tomllib.loads((out / MANIFEST).read_text())
    folders = dataset_tasks(out)
    assert len(folders) == 2 and {t["name"] for t in data["tasks"]} == {t.name for t in folders}
    assert {t["digest"] for t in data["tasks"]} == {task_digest(t.folder) for t in folders}
    for task in folders:
        assert task.config["schema_version"] == "1.4"
        assert task.config["task"]["version"] == "0.3.0" and task.config["task"]["authors"] == AUTHORS


@pytest.fixture
def decay_base():
    """A base image tag of the test's own (a copy of miner's base image), removed after."""
    import docker

    client = docker.from_env()
    tag = "miner/decay-test:base"
    client.images.get("miner/base:bookworm").tag(tag)
    yield client, tag
    try:
        client.images.remove(tag, force=True)
    except docker.errors.APIError:
        pass


@pytest.mark.slow
@pytest.mark.docker
def test_revalidate_names_what_decayed_and_nothing_on_an_untouched_export(mined_store: Path, tmp_path: Path,
                                                                       decay_base) -> None:
    """An untouched export re-checks clean; after its base image changed under the same name (it lost
    python3's venv module) every task is named with the failing build; a task folder edited after the
    export is named as changed and not run; the verdicts reach checks.json and the card."""
    from test_export import copy_store

    client, tag = decay_base
    root = copy_store(mined_store, tmp_path / "store")
    with Store(root, create=False) as opened:
        task = next(t for t in opened.list_tasks() if t.family == "data")
    env = {"MINER_STORE": str(root), "COLUMNS": "200"}
    runner = CliRunner()
    out = tmp_path / "ds"
    done = runner.invoke(main, export_args(out, "--type", task.type_id, "--repo", task.repo, "--limit", "1",
                                           "--base-image", tag, "--dataset", "acme/decay"), env=env)
    assert done.exit_code == 0, done.output
    clean = runner.invoke(main, ["revalidate", str(out), "--json"])
    assert clean.exit_code == 0, clean.output
    verdicts = json.loads(clean.stdout)
    assert [v["ok"] for v in verdicts] == [True] and verdicts[0]["oracle_reward"] == 1
    assert "Re-checked" in (out / CARD).read_text() and "Decayed" not in (out / CARD).read_text()
    # the base image changes under its name, as a rebuilt upstream image does
    client.images.build(fileobj=__import__("io").BytesIO(
        b"FROM miner/base:bookworm\nRUN rm -rf /usr/lib/python3*/venv /usr/lib/python3*/ensurepip\n"),
        tag=tag, rm=True)
    decayed = runner.invoke(main, ["revalidate", str(out)])
    assert decayed.exit_code == 1, decayed.output
    checks = json.loads((out / "checks.json").read_text())
    (name, verdict), = checks.items()
    assert not verdict["ok"] and "does not build" in verdict["reason"]
    card = (out / CARD).read_text()
    assert "Decayed" in card and name in card.split("Decayed", 1)[1]
    # a folder edited since the export: named, not run
    folder = dataset_tasks(out)[0].folder
    (folder / "instruction.md").write_text("Just make it pass.\n")
    edited = runner.invoke(main, ["revalidate", str(out), "--json"])
    assert edited.exit_code == 1
    assert "changed since the export" in json.loads(edited.stdout)[0]["reason"]


def test_revalidate_wants_a_dataset(tmp_path: Path) -> None:
    done = CliRunner().invoke(main, ["revalidate", str(tmp_path)])
    assert done.exit_code != 0 and "export --format harbor --dataset" in done.output


@pytest.mark.docker
def test_hub_rows_load_with_datasets_and_import_gives_back_the_same_tasks(mined_store: Path, tmp_path: Path) -> None:
    """`export --format hf`: `datasets.load_dataset` on the folder gives one row per task (name, digest,
    labels); `miner import` materialises the same folders (same names, same digests); a folder edited
    after the export is refused by name and the others still come."""
    from datasets import load_dataset
    from test_export import copy_store

    root = copy_store(mined_store, tmp_path / "store")
    env = {"MINER_STORE": str(root), "COLUMNS": "200"}
    runner = CliRunner()
    out = tmp_path / "hf"
    done = runner.invoke(main, ["export", "--format", "hf", "--out", str(out), "--limit", "3",
                                "--dataset", "acme/env-repair"], env=env)
    assert done.exit_code == 0, done.output
    rows = list(load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf-cache")))
    listed = {t["name"]: t["digest"] for t in tomllib.loads((out / "tasks" / MANIFEST).read_text())["tasks"]}
    assert len(rows) == 3 and {r["name"]: r["digest"] for r in rows} == listed
    for r in rows:
        assert r["instruction"] and r["inversion_family"] and r["evidence_kinds"] and r["project"]
        assert json.loads(r["metadata"])["miner_task_id"] == r["miner_task_id"]
    assert (out / "README.md").read_text().startswith("---\npretty_name: acme/env-repair\n")
    back = tmp_path / "back"
    imported = runner.invoke(main, ["import", str(out), "-o", str(back)])
    assert imported.exit_code == 0, imported.output
    assert "3 task folder(s) written" in imported.output
    assert {t.name: task_digest(t.folder) for t in dataset_tasks(back)} == listed
    assert tomllib.loads((back / MANIFEST).read_text())["tasks"] == tomllib.loads(
        (out / "tasks" / MANIFEST).read_text())["tasks"]
    again = runner.invoke(main, ["import", str(out), "-o", str(back)])
    assert again.exit_code == 0 and "0 task folder(s) written" in again.output and "3 already there" in again.output
    victim = sorted(rows, key=lambda r: r["name"])[0]
    (out / victim["path"] / "instruction.md").write_text("Make it pass.\n")
    partial = runner.invoke(main, ["import", str(out), "-o", str(tmp_path / "partial")])
    assert partial.exit_code != 0 and f"refused {victim['name']}" in partial.output
    assert len(dataset_tasks(tmp_path / "partial")) == 2
    # another dataset in a folder of the same name: its own rows, not the library's cached ones
    other = tmp_path / "again" / "hf"
    done = runner.invoke(main, ["export", "--format", "hf", "--out", str(other), "--limit", "1"], env=env)
    assert done.exit_code == 0, done.output
    imported = runner.invoke(main, ["import", str(other), "-o", str(tmp_path / "other")])
    assert imported.exit_code == 0 and "1 task folder(s) written" in imported.output, imported.output


# -- pre-built images (--images) -----------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def local_registry(tmp_path: Path):
    """A Docker registry (Debian's docker-registry, the distribution project's server) on a free
    local port, storing in tmp_path; its address. The engine pushes to 127.0.0.1 without TLS."""
    import time
    import urllib.request

    from conftest import need

    exe = shutil.which("docker-registry")
    need("registry", None if exe else "Debian's docker-registry is not installed (apt-get install docker-registry)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'blobs'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    server = subprocess.Popen([exe, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def environment_digest(folder: Path) -> str:
    from miner.export.dataset import content_digest

    return content_digest({p.relative_to(folder).as_posix(): p.read_bytes()
                           for p in (folder / "environment").rglob("*") if p.is_file()})


@pytest.mark.slow
@pytest.mark.harbor
@pytest.mark.docker
def test_images_are_named_by_digest_pushed_and_run_by_harbor_without_a_build(mined_store: Path, tmp_path: Path,
                                                                           local_registry: str, harbor) -> None:
    """`--images --registry`: each task names its image by the digest of environment/, the image is in
    the registry, and Harbor runs the task from it (pulled: the local copy was removed) with the oracle
    scoring 1 and nop 0. Without a registry the images land in one archive docker can load."""
    import tarfile
    import urllib.request

    import docker
    from conftest import harbor_rewards
    from test_export import copy_store

    root = copy_store(mined_store, tmp_path / "store")
    with Store(root, create=False) as opened:
        task = next(t for t in opened.list_tasks() if t.family == "config")
    env = {"MINER_STORE": str(root), "COLUMNS": "200"}
    out = tmp_path / "pushed"
    done = CliRunner().invoke(main, export_args(out, "--type", task.type_id, "--repo", task.repo, "--limit", "1",
                                                "--images", "--registry", f"{local_registry}/minertest",
                                                "--dataset", "acme/images"), env=env)
    assert done.exit_code == 0, done.output
    (folder_task,) = dataset_tasks(out)
    ref = folder_task.config["environment"]["docker_image"]
    folder = folder_task.folder
    assert ref == f"{local_registry}/minertest/{folder.name}:sha256-{environment_digest(folder)}"
    tags = json.loads(urllib.request.urlopen(f"http://{local_registry}/v2/minertest/{folder.name}/tags/list").read())
    assert tags["tags"] == [ref.rsplit(":", 1)[1]]
    client = docker.from_env()
    client.images.remove(ref, force=True)
    for agent, expected in (("oracle", 1.0), ("nop", 0.0)):
        jobs = tmp_path / f"jobs-{agent}"
        run = harbor("run", "-p", out, "-a", agent, "-o", jobs, "-n", "1")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert harbor_rewards(jobs) == {folder.name: expected}, run.stdout[-2000:]
    assert client.images.get(ref)  # pulled from the registry to run
    client.images.remove(ref, force=True)
    # no registry: one archive
    local = tmp_path / "archived"
    done = CliRunner().invoke(main, export_args(local, "--type", task.type_id, "--repo", task.repo, "--limit", "1",
                                                "--images"), env=env)
    assert done.exit_code == 0, done.output
    ref = dataset_tasks(local)[0].config["environment"]["docker_image"]
    assert ref.startswith("miner-tasks/")
    with tarfile.open(local / "images.tar") as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
    assert [tag for entry in manifest for tag in entry["RepoTags"]] == [ref]
    client.images.remove(ref, force=True)
