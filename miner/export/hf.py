"""A dataset hub's layout: rows the `datasets` library loads, each naming a Harbor task folder.

    <out>/README.md            the dataset card (miner.export.dataset) under the YAML header the hub
                               and `datasets.load_dataset(<out>)` read: one config, data/tasks.jsonl
    <out>/data/tasks.jsonl     one row per task: its Harbor name, folder and digest, the instruction,
                               the labels to filter on (family, type, category, difficulty, measured
                               difficulty, evidence, project) and the whole [metadata] as JSON text
    <out>/tasks/<name>/        the Harbor task folders, as files (miner.export.harbor), and the Harbor
                               dataset over them (tasks/dataset.toml), so `harbor run -p <out>/tasks`
                               runs what the rows name

`miner import <out>` (miner.importer) loads the rows with the `datasets` library and materialises
the folders, each checked against its row's digest.

Registered as the format "hf" (miner.export.registry).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from miner.export.common import DEFAULT_ORG, ExportOptions
from miner.export.dataset import DatasetTask, author_table, card, dataset_tasks, manifest, read_checks, save
from miner.export.harbor import Harbor
from miner.export.images import build_task_images
from miner.export.registry import register

ROWS = "data/tasks.jsonl"
TASKS = "tasks"


def row(task: DatasetTask, digest: str) -> dict:
    """The row of one task folder."""
    meta = task.metadata
    return {
        "name": task.name,
        "path": f"{TASKS}/{task.folder.name}",
        "digest": digest,
        "instruction": (task.folder / "instruction.md").read_text(),
        "inversion_type": meta.get("inversion_type", ""),
        "inversion_family": meta.get("inversion_family", ""),
        "inversion_category": meta.get("inversion_category", ""),
        "difficulty": meta.get("difficulty", ""),
        "blind_repair": meta.get("blind_repair", ""),
        "evidence_kinds": list(meta.get("evidence_kinds", [])),
        "project": meta.get("source") or meta.get("repository", ""),
        "miner_task_id": meta.get("miner_task_id", ""),
        "metadata": json.dumps(meta, sort_keys=True),
    }


def front_matter(name: str) -> str:
    """The card's YAML header: the hub's and `datasets`' config pointing at the rows alone (the task
    folders hold .txt, .csv and .json files the library would otherwise try to load)."""
    header = {"pretty_name": name, "tags": ["environment-repair", "terminal-agents", "harbor"],
              "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": ROWS}]}]}
    return "---\n" + yaml.safe_dump(header, sort_keys=False) + "---\n\n"


@register("hf")
class HubRows(Harbor):
    """Rows for a dataset hub, each naming its Harbor task folder (shipped beside them)."""

    def task_root(self, out: Path) -> Path:
        return out / TASKS

    def finish(self, out: Path, options: ExportOptions) -> Path:
        name = options.dataset or f"{options.org or DEFAULT_ORG}/environment-repair"
        root = self.task_root(out)
        if options.images:
            build_task_images(root, options.registry)
        tasks = dataset_tasks(root)
        data = manifest(name, options.version, [author_table(a) for a in options.authors], tasks)
        save(root, data, tasks)  # the folders are a Harbor dataset too
        digests = {t["name"]: t["digest"] for t in data["tasks"]}
        rows = [row(task, digests[task.name]) for task in tasks]
        (out / ROWS).parent.mkdir(parents=True, exist_ok=True)
        (out / ROWS).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        (out / "README.md").write_text(front_matter(name) + card(data, tasks, read_checks(root)))
        return out / ROWS
