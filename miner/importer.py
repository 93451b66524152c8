"""`miner import`: task folders back from a dataset in the hub's layout (`miner export --format hf`).

The rows are read with the `datasets` library, as a trainer reads them, from a local folder (no hub
is reachable here: a hub dataset is imported from its downloaded snapshot folder). Each row's task
folder is copied to the destination and must have the digest its row names, before and after the
copy: a folder that does not is refused, named, and the others still come.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from miner.export.dataset import MANIFEST, task_digest
from miner.export.hf import TASKS


class DatasetError(Exception):
    """The dataset cannot be read at all; the message says why."""


@dataclass
class Imported:
    written: list[str] = field(default_factory=list)  # task names
    kept: list[str] = field(default_factory=list)  # already there, same digest
    refused: dict[str, str] = field(default_factory=dict)  # task name -> why


def load_rows(source: Path) -> list[dict]:
    """The rows of the dataset at `source`, loaded by the `datasets` library."""
    try:
        import datasets
    except ModuleNotFoundError:
        raise DatasetError("reading a hub dataset needs the `datasets` library: pip install 'miner[hf]'") from None
    if not (source / "README.md").is_file():
        raise DatasetError(f"{source} holds no README.md: not a dataset exported with --format hf")
    # the library's cache knows a local dataset by its folder's name and layout, not its contents: a
    # dataset exported again into a folder of the same name would come back as the old rows
    try:
        with tempfile.TemporaryDirectory(prefix="miner-import-") as cache:
            return list(datasets.load_dataset(str(source), split="train", cache_dir=cache))
    except (ValueError, FileNotFoundError, datasets.exceptions.DatasetGenerationError) as exc:
        raise DatasetError(f"{source}: the datasets library cannot load it: {exc}") from None


def import_tasks(source: Path, dest: Path, overwrite: bool = False) -> Imported:
    """Materialise every task folder the rows of `source` name into `dest`."""
    rows = load_rows(source)
    done = Imported()
    dest.mkdir(parents=True, exist_ok=True)
    for row in rows:
        name, folder = row["name"], source / row["path"]
        target = dest / folder.name
        if not (folder / "task.toml").is_file():
            done.refused[name] = f"its folder {row['path']} is missing"
        elif task_digest(folder) != row["digest"]:
            done.refused[name] = f"{row['path']} is not the folder its row names (digest differs)"
        elif target.exists() and not overwrite:
            if task_digest(target) == row["digest"]:
                done.kept.append(name)
            else:
                done.refused[name] = f"{target} exists with other contents (use --overwrite)"
        else:
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(folder, target)
            if task_digest(target) != row["digest"]:  # a copy that lost a file (permissions, links)
                done.refused[name] = f"the copy of {row['path']} does not have its digest"
            else:
                done.written.append(name)
    if not done.refused and (source / TASKS / MANIFEST).is_file() and not (dest / MANIFEST).exists():
        shutil.copy2(source / TASKS / MANIFEST, dest / MANIFEST)
    return done
