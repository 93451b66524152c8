"""Pre-built task images for trainers that cannot build Dockerfiles (`miner export --images`).

Each Harbor task's image is named by the content of what it is built from: the repository is
`<registry or miner-tasks>/<task folder>`, the tag `sha256-<digest of environment/>`, so one
build context always gives one name and a changed context a new one. The name goes into task.toml
as `[environment] docker_image` (Harbor then runs the image instead of building environment/,
which stays in the folder for those who build). After the export, every task folder's image is
built once and pushed to the registry named by the user, or, with none, saved with its layers
shared in one archive, `images.tar` (`docker load -i images.tar`).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from miner.export.common import ExportError
from miner.export.dataset import content_digest, dataset_tasks

LOCAL_REPOSITORY = "miner-tasks"
ARCHIVE = "images.tar"


def context_digest(files: dict[str, bytes]) -> str:
    """The digest of a task's environment/ files (folder-relative paths), as Harbor digests a task."""
    return content_digest({k: v for k, v in files.items() if k.startswith("environment/")})


def image_ref(registry: str | None, folder_name: str, digest: str) -> str:
    """The task image's name: repository from the registry (or miner-tasks) and the folder, tag from the digest."""
    repository = f"{(registry or LOCAL_REPOSITORY).rstrip('/')}/{folder_name.lower()}"
    return f"{repository}:sha256-{digest}"


@dataclass
class ImageReport:
    built: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)
    archive: Path | None = None


def push(client, ref: str) -> None:  # noqa: ANN001 - a docker client
    """Push one image; ExportError with the registry's own message when it refuses."""
    repository, _, tag = ref.rpartition(":")
    for line in client.images.push(repository, tag=tag, stream=True, decode=True):
        if "error" in line:
            raise ExportError(f"pushing {ref}: {line.get('errorDetail', {}).get('message') or line['error']}")


def save(refs: list[str], archive: Path) -> None:
    """One archive holding every image, layers shared (the SDK saves one image per archive; the
    engine's CLI saves several at once)."""
    done = subprocess.run(["docker", "save", "-o", str(archive), *refs], capture_output=True, text=True)
    if done.returncode != 0:
        raise ExportError(f"docker save: {done.stderr.strip()[-500:]}")


def build_task_images(out: Path, registry: str | None, client=None) -> ImageReport:  # noqa: ANN001
    """Build (and push, or archive) the image of every task folder in `out` that names one."""
    from miner.sandbox.base import BuildError
    from miner.sandbox.docker.gateway import build_image
    from miner.sandbox.docker.images import docker_client

    client = client or docker_client()
    report = ImageReport()
    for task in dataset_tasks(out):
        ref = task.config.get("environment", {}).get("docker_image")
        if not ref:
            continue  # exported without --images
        try:
            build_image(client, context=task.folder / "environment", tag=ref, what=f"{task.folder.name}/environment/")
        except BuildError as exc:
            raise ExportError(str(exc)) from None
        report.built.append(ref)
        if registry:
            push(client, ref)
            report.pushed.append(ref)
    if report.built and not registry:
        report.archive = out / ARCHIVE
        save(report.built, report.archive)
    return report
