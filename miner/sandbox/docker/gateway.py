"""The Docker gateway: what several stages ask of the engine, written once.

    build_image(client, context=..., tag=...)   # an image; miner's BuildError with the log's tail
    remove_image(client, ref)                   # gone, or left for gc when still in use
    find_image(client, ref)                     # a local image, or None
    tar_files({...}) / tar_folder(folder, name) # root-owned archives for put_archive
    read_file(container, path)                  # one file out of a container, or None
    run_once(client, image, argv, files=...)    # a one-shot container: (exit code, stdout, stderr)

The sandbox backend, the export, `miner check` and the attack runner call these; each keeps only
its own concerns (the export's and the check's errors are their own, made from a BuildError).
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.images import Image

from miner.sandbox.base import BuildError

BUILD_LOG_TAIL = 60  # lines of build output kept in BuildError.log
READ_ATTEMPTS = 5  # a file being written can come back as a truncated archive: read it again
SYMLINK_HOPS = 16


def find_image(client: docker.DockerClient, ref: str) -> Image | None:
    """The local image named or id'd by ref, or None."""
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if getattr(exc, "status_code", None) == 404:
            return None
        raise


# -- images ------------------------------------------------------------------------------------


def _log_text(chunks: Iterable[dict[str, Any]]) -> str:
    out = []
    for chunk in chunks:
        if "stream" in chunk:
            out.append(chunk["stream"])
        elif "error" in chunk:
            out.append(chunk["error"] + "\n")
        elif "status" in chunk:
            out.append(chunk["status"] + "\n")
    return "".join(out)


def _tail(text: str, lines: int = BUILD_LOG_TAIL) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _remove_step_images(client: docker.DockerClient, log_text: str) -> None:
    """After a failed build, remove the untagged step images it left (the classic builder keeps them)."""
    for short in reversed(re.findall(r"---> ([0-9a-f]{12})\b", log_text)):
        image = find_image(client, short)
        if image is not None and not image.tags:
            try:
                client.images.remove(image.id, noprune=False)
            except docker.errors.APIError:
                pass  # still a parent of a cached image: it is not a leftover


def build_image(
    client: docker.DockerClient,
    *,
    context: Path | None = None,
    dockerfile_text: str | None = None,
    dockerfile: str = "Dockerfile",
    tag: str | None = None,
    image_labels: dict[str, str] | None = None,
    buildargs: dict[str, str] | None = None,
    memory_mb: int | None = None,
    target: str | None = None,
    timeout: float | None = None,
    what: str = "image",
    nocache: bool = False,
) -> Image:
    """Build an image from a context folder (or a lone Dockerfile text), up to stage `target`;
    BuildError naming `what`, with the log's tail, on failure. `nocache` runs every step again
    (the base image is never pulled: it is whatever the engine holds under its name)."""
    kwargs: dict[str, Any] = dict(tag=tag, rm=True, forcerm=True, labels=image_labels or None,
                                  buildargs=buildargs or None, pull=False, nocache=nocache)
    if target:
        kwargs["target"] = target
    if timeout:
        kwargs["timeout"] = int(timeout)
    if memory_mb:
        kwargs["container_limits"] = {"memory": memory_mb * 1024 * 1024, "memswap": -1}
    if context is not None:
        if dockerfile_text is not None:
            (context / dockerfile).write_text(dockerfile_text)
        kwargs.update(path=str(context), dockerfile=dockerfile)
    else:
        kwargs["fileobj"] = io.BytesIO((dockerfile_text or "").encode())
    try:
        image, chunks = client.images.build(**kwargs)
        _ = _log_text(chunks)
        return image
    except docker.errors.BuildError as exc:
        text = _log_text(exc.build_log)
        _remove_step_images(client, text)
        raise BuildError(f"{what} failed to build: {exc.msg}", log=_tail(text)) from exc
    except docker.errors.APIError as exc:
        raise BuildError(f"{what} failed to build: {exc.explanation or exc}", log=str(exc)) from exc


def remove_image(client: docker.DockerClient, ref: str) -> None:
    """Remove an image miner built; one already gone or still in use (the same build under another
    tag, a container of another run) is left as it is, for `miner gc`."""
    try:
        client.images.remove(ref, force=True)
    except docker.errors.APIError:
        pass


# -- archives ----------------------------------------------------------------------------------


def tar_files(files: dict[str, bytes], mode: int = 0o644) -> bytes:
    """A tar of the given files (root-owned, `mode`) for put_archive."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            info.uid = info.gid = 0
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_folder(folder: Path, arcname: str) -> bytes:
    """A tar of a folder's contents (or of one file) under `arcname`, root-owned (for put_archive)."""
    buf = io.BytesIO()

    def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(folder), arcname=arcname, filter=owner)
    return buf.getvalue()


def read_file(container: Any, path: str, follow: bool = False) -> bytes | None:
    """One file of a container, None when it does not exist; with `follow`, symbolic links inside
    the container are followed as open() would. A file another process is writing can come back
    as a truncated archive: it is read again then."""
    for _ in range(SYMLINK_HOPS):
        member, data = _member(container, path)
        if member is None:
            return None
        if follow and member.issym():
            path = os.path.normpath(os.path.join(os.path.dirname(path), member.linkname))
            continue
        if member.isdir() and follow:
            raise IsADirectoryError(path)
        return data
    raise OSError(f"too many levels of symbolic links: {path}")


def _member(container: Any, path: str) -> tuple[tarfile.TarInfo | None, bytes | None]:
    for attempt in range(READ_ATTEMPTS):
        try:
            stream, _ = container.get_archive(path)
        except docker.errors.NotFound:
            return None, None
        try:
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member is not None and member.isfile() else None
                return member, handle.read() if handle else None
        except tarfile.ReadError:
            if attempt == READ_ATTEMPTS - 1:
                raise
            time.sleep(0.05)
    return None, None


# -- one-shot containers -----------------------------------------------------------------------


def run_once(client: docker.DockerClient, image: str, argv: list[str], *, files: dict[str, bytes] | None = None,
             at: str = "/tmp", timeout: float = 300.0, **options: Any) -> tuple[int, str, str]:
    """Run argv in a fresh container of `image` (created with `options`: network, capabilities,
    labels, entrypoint, user), `files` put under `at` before it starts; (exit code, stdout,
    stderr). The container is removed whatever happens."""
    container = client.containers.create(image, argv, **options)
    try:
        if files:
            container.put_archive(at, tar_files(files))
        container.start()
        status = container.wait(timeout=timeout)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return int(status.get("StatusCode", -1)), out, err
    finally:
        container.remove(force=True)
