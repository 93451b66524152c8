"""Docker image management for miner: engine client, labels, base images, builds and cleanup.

Everything miner creates in a Docker engine carries the label `miner=1` plus `miner.kind`
(base, project, healthy, broken, fork), so `miner images list` / `miner images prune` can find
it, and forks carry `miner.session` / `miner.pid` / `miner.host` so that leftovers of a crashed or
interrupted crawl are recognised and removed by the next run.

Image kinds:
  base     a Debian base image made by `bootstrap_base` (debootstrap, no registry needed)
  project  a Dockerized project's own Dockerfile, built as is
  healthy  the project installed under /sandbox (one per project, commit and build recipe)
  stage    the layout stage of a healthy image, before its site-packages is recorded
  broken   healthy + one layer running a break script (layout.break_dockerfile)

Builds go through the docker SDK (`client.images.build` with a context folder). The host's pip
settings (index URLs, trusted hosts, CA bundle) are forwarded into builds so pip works behind a
TLS-inspecting proxy; local `file://` indexes and credentials are never forwarded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

import docker
import docker.errors
import docker.utils

from miner.models import content_id
from miner.sandbox.base import BackendUnavailable, BuildError, SandboxError
from miner.sandbox.docker.gateway import BUILD_LOG_TAIL, build_image, find_image
from miner.sandbox.docker.layout import HOST_CA_NAME, HOST_CA_PATH, break_dockerfile

log = logging.getLogger(__name__)

LABEL = "miner"
KIND = "miner.kind"
DEFAULT_BASE_IMAGE = "python:3.11-slim"
BOOTSTRAP_TAG = "miner/base:bookworm"
BOOTSTRAP_SUITE = "bookworm"
# gettext: msgfmt, which data/catalogue-uncompiled's fix compiles message catalogues with
BOOTSTRAP_PACKAGES = ["python3", "python3-venv", "python3-pip", "git", "ca-certificates", "gettext"]

NO_ENGINE = (
    "no Docker engine answers ({reason}). Start one (e.g. `dockerd >/var/log/dockerd.log 2>&1 &`, "
    "or `systemctl start docker`; set DOCKER_HOST if it listens elsewhere), "
    "or use `--backend local`, which works without Docker."
)
NO_BASE = (
    "base image {image!r} is not present and cannot be pulled ({reason}). "
    "Build a local Debian base image with `miner images bootstrap` (no registry needed), "
    "or set MINER_BASE_IMAGE to an image you have."
)


def labels(kind: str, **extra: str) -> dict[str, str]:
    """The labels of a miner object of one kind."""
    return {LABEL: "1", KIND: kind, **{f"miner.{k}": str(v) for k, v in extra.items()}}


def docker_client(timeout: int = 600) -> docker.DockerClient:
    """A client of the engine named by the environment (DOCKER_HOST or the default socket).

    Raises BackendUnavailable with a how-to-start message when no engine answers.
    """
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests and OS errors alike
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise BackendUnavailable(NO_ENGINE.format(reason=reason)) from exc
    return client


# --- base images ---------------------------------------------------------------------------


def configured_base_image(explicit: str | None = None) -> tuple[str, bool]:
    """(image, was_chosen): explicit argument, else MINER_BASE_IMAGE, else the default."""
    if explicit:
        return explicit, True
    env = os.environ.get("MINER_BASE_IMAGE", "").strip()
    if env:
        return env, True
    return DEFAULT_BASE_IMAGE, False


def resolve_base_image(client: docker.DockerClient, explicit: str | None = None) -> str:
    """A present base image: the configured one (pulled if needed), else the bootstrap image.

    The bootstrap fallback applies only when nothing was chosen (the built-in default is missing);
    an image the user asked for is never silently replaced.
    """
    name, chosen = configured_base_image(explicit)
    if find_image(client, name):
        return name
    repo, tag = docker.utils.parse_repository_tag(name)
    try:
        client.images.pull(repo, tag=tag or "latest")  # never every tag of a repository
        return name
    except docker.errors.DockerException as exc:
        reason = str(exc).splitlines()[0][:200]
    if not chosen and find_image(client, BOOTSTRAP_TAG):
        log.info("base image %s unavailable (%s); using %s", name, reason, BOOTSTRAP_TAG)
        return BOOTSTRAP_TAG
    raise BackendUnavailable(NO_BASE.format(image=name, reason=reason))


def debian_mirror(root: Path = Path("/")) -> str:
    """The Debian mirror configured for apt on this host (deb822 sources first, then sources.list)."""
    env = os.environ.get("MINER_DEBIAN_MIRROR", "").strip()
    if env:
        return env
    candidates: list[str] = []
    deb822 = sorted((root / "etc/apt/sources.list.d").glob("*.sources"))
    for path in deb822:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("URIs:"):
                candidates += line.split(":", 1)[1].split()
    legacy = [root / "etc/apt/sources.list", *sorted((root / "etc/apt/sources.list.d").glob("*.list"))]
    for path in legacy:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            parts = re.sub(r"\[[^]]*\]", "", line).split()
            if len(parts) >= 3 and parts[0] == "deb":
                candidates.append(parts[1])
    for uri in candidates:
        if "security" not in uri and uri.startswith(("http://", "https://", "file:/")):
            return uri
    return "http://deb.debian.org/debian"


def bootstrap_base(
    client: docker.DockerClient,
    tag: str = BOOTSTRAP_TAG,
    *,
    mirror: str | None = None,
    suite: str = BOOTSTRAP_SUITE,
    packages: Iterable[str] = BOOTSTRAP_PACKAGES,
    echo: bool = False,
) -> str:
    """Build a Debian base image with debootstrap and import it; returns the image id.

    Works without any container registry: only the Debian mirror apt already uses is needed.
    """
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap is not installed (apt-get install debootstrap)")
    mirror = mirror or debian_mirror()
    with tempfile.TemporaryDirectory(prefix="miner-bootstrap-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            suite,
            str(rootfs),
            mirror,
        ]
        proc = subprocess.run(cmd, capture_output=not echo, text=True)
        if proc.returncode != 0:
            tail = "\n".join(((proc.stdout or "") + (proc.stderr or "")).splitlines()[-BUILD_LOG_TAIL:])
            raise BuildError(f"debootstrap failed with exit code {proc.returncode}", log=tail)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        archive = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], check=True)
        repo, _, version = tag.partition(":")
        changes = [
            f"LABEL {LABEL}=1 {KIND}=base miner.suite={suite} miner.packages={','.join(packages)}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
            'CMD ["bash"]',
        ]
        with archive.open("rb") as fh:
            # a generator makes requests send real chunks (a plain file object with the SDK's
            # chunked header is rejected by the engine: "invalid byte in chunk length")
            chunks = iter(lambda: fh.read(1 << 20), b"")
            client.api.import_image_from_stream(chunks, repository=repo, tag=version or "latest", changes=changes)
    image = client.images.get(tag)
    return image.id


# --- pip settings forwarded into builds ---------------------------------------------------


@dataclass
class PipSettings:
    """The host's pip settings that make sense inside a container build."""

    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    trusted_hosts: list[str] = field(default_factory=list)
    cert: Path | None = None
    timeout: str | None = None
    retries: str | None = None
    proxy: str | None = None
    dropped: list[str] = field(default_factory=list)  # why a host setting was not forwarded

    def env(self) -> dict[str, str]:
        """PIP_* variables for the image (the CA bundle is copied in as HOST_CA_PATH)."""
        out = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
        if self.index_url:
            out["PIP_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            out["PIP_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        if self.find_links:
            out["PIP_FIND_LINKS"] = " ".join(self.find_links)
        if self.trusted_hosts:
            out["PIP_TRUSTED_HOST"] = " ".join(self.trusted_hosts)
        if self.cert:  # npm's too: a Node project's build reaches its registry through the same proxy
            out["PIP_CERT"] = out["NPM_CONFIG_CAFILE"] = HOST_CA_PATH
        if self.timeout:
            out["PIP_DEFAULT_TIMEOUT"] = self.timeout
        if self.retries:
            out["PIP_RETRIES"] = self.retries
        if self.proxy:
            out["PIP_PROXY"] = self.proxy
        return out

    def fingerprint(self) -> dict[str, Any]:
        data = self.env()
        if self.cert and self.cert.is_file():
            data["cert_sha256"] = hashlib.sha256(self.cert.read_bytes()).hexdigest()
        return data


def _pip_config_pairs(python: str = sys.executable) -> list[tuple[str, str]]:
    """(option, value) pairs from `pip config list`, config files first, then PIP_* env."""
    pairs: list[tuple[str, str]] = []
    try:
        proc = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
        lines = proc.stdout.splitlines() if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        lines = []
    files, env = [], []
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip().strip("'\"")
        option = key.rsplit(".", 1)[-1].strip()
        (env if key.startswith(":env:") else files).append((option, value))
    pairs += files + env
    for key, value in os.environ.items():
        if key.startswith("PIP_"):
            pairs.append((key[4:].lower().replace("_", "-"), value))
    return pairs


def _remote(url: str, what: str, dropped: list[str]) -> str | None:
    """url when a container can use it: remote and without credentials; else None (noted)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        dropped.append(f"{what} {url}: a host-local location is not visible inside a container")
        return None
    if parts.username or parts.password:
        dropped.append(f"{what} {parts.hostname}: credentials are never baked into images")
        return None
    return url


def host_pip_settings(python: str = sys.executable) -> PipSettings:
    """Read the host's pip configuration (`pip config list` and PIP_* env) for image builds."""
    settings = PipSettings()
    raw: dict[str, str] = {}
    for option, value in _pip_config_pairs(python):
        raw[option] = value  # later sources (env) win, as in pip
    dropped = settings.dropped
    if raw.get("index-url"):
        settings.index_url = _remote(raw["index-url"], "index-url", dropped)
    for url in raw.get("extra-index-url", "").split():
        if (kept := _remote(url, "extra-index-url", dropped)) and kept not in settings.extra_index_urls:
            settings.extra_index_urls.append(kept)
    for url in raw.get("find-links", "").split():
        if (kept := _remote(url, "find-links", dropped)) and kept not in settings.find_links:
            settings.find_links.append(kept)
    settings.trusted_hosts = raw.get("trusted-host", "").split()
    cert = raw.get("cert") or os.environ.get("REQUESTS_CA_BUNDLE") or ""
    if cert and Path(cert).is_file():
        settings.cert = Path(cert)
    settings.timeout = raw.get("default-timeout") or raw.get("timeout") or None
    settings.retries = raw.get("retries") or None
    if raw.get("proxy"):
        settings.proxy = _remote(raw["proxy"], "proxy", dropped)
    if raw.get("constraint"):
        dropped.append(f"constraint {raw['constraint']}: a host file, not forwarded")
    return settings


def copy_host_ca(settings: PipSettings, context: Path) -> str:
    """Copy the host's CA bundle into a build context when pip needs it; its context path, or ""."""
    if not settings.cert:
        return ""
    shutil.copyfile(settings.cert, context / HOST_CA_NAME)
    return HOST_CA_NAME


# --- building ------------------------------------------------------------------------------


def image_size(client: docker.DockerClient, ref: str) -> int:
    """Total size in bytes of an image (its layers and all its parents')."""
    return int(client.images.get(ref).attrs.get("Size", 0))


def unique_size(client: docker.DockerClient, image: str, parent: str) -> int:
    """Storage an image adds on top of a parent it was built FROM (image size minus parent size)."""
    return max(0, image_size(client, image) - image_size(client, parent))


@dataclass
class BrokenImage:
    """A built broken snapshot and the storage it adds over its healthy image."""

    id: str
    tag: str
    healthy: str
    unique_bytes: int


def build_broken_image(
    client: docker.DockerClient,
    healthy_image: str,
    break_script: str,
    *,
    tag: str | None = None,
    memory_mb: int | None = None,
) -> BrokenImage:
    """Build healthy + break script (cached by tag: same inputs, same image)."""
    healthy = client.images.get(healthy_image)
    tag = tag or f"miner/broken-{content_id(healthy.id, break_script)}:latest"
    existing = find_image(client, tag)
    if existing is None:
        with tempfile.TemporaryDirectory(prefix="miner-broken-") as tmp:
            ctx = Path(tmp)
            (ctx / "break.sh").write_text(break_script)
            existing = build_image(
                client,
                context=ctx,
                dockerfile_text=break_dockerfile(healthy.id, "break.sh"),
                tag=tag,
                image_labels=labels("broken", healthy=healthy.id),
                memory_mb=memory_mb,
                what="broken image",
            )
    return BrokenImage(
        id=existing.id, tag=tag, healthy=healthy.id, unique_bytes=unique_size(client, existing.id, healthy.id)
    )


# --- listing and pruning -------------------------------------------------------------------


@dataclass
class ImageInfo:
    id: str
    tags: list[str]
    kind: str
    size: int
    created: str


def list_images(client: docker.DockerClient) -> list[ImageInfo]:
    """miner's images: labelled miner=1, or tagged in the miner/ namespace."""
    seen: dict[str, ImageInfo] = {}
    for image in client.images.list(all=False):
        lab = image.labels or {}
        if lab.get(LABEL) != "1" and not any(t.startswith("miner/") for t in image.tags):
            continue
        seen[image.id] = ImageInfo(
            id=image.short_id.removeprefix("sha256:"),
            tags=list(image.tags),
            kind=lab.get(KIND, "base" if any(t.startswith("miner/base") for t in image.tags) else "?"),
            size=int(image.attrs.get("Size", 0)),
            created=str(image.attrs.get("Created", ""))[:19],
        )
    return sorted(seen.values(), key=lambda i: (i.kind, i.tags))


@dataclass
class PruneReport:
    containers: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    reclaimed: int = 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_containers(client: docker.DockerClient, filters: dict[str, Any], report: PruneReport,
                      only_stale: bool = False) -> None:
    """Force-remove containers matching label filters (only those of dead processes if only_stale)."""
    for container in client.containers.list(all=True, filters=filters):
        lab = container.labels or {}
        if only_stale:
            same_host = lab.get("miner.host") == socket.gethostname()
            pid = int(lab.get("miner.pid", "0") or 0)
            if not same_host or pid <= 0 or _pid_alive(pid):
                continue
        try:
            container.remove(force=True, v=True)
            report.containers.append(container.short_id)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            log.warning("could not remove container %s: %s", container.short_id, exc)


def prune(client: docker.DockerClient, *, healthy: bool = False, base: bool = False,
          match: dict[str, str] | None = None) -> PruneReport:
    """Remove miner's containers, broken and dangling images; healthy/base images on request.

    `match` narrows everything to objects that also carry those labels (tests use it).
    """
    report = PruneReport()
    label_filter = [f"{LABEL}=1", *(f"{k}={v}" for k, v in (match or {}).items())]
    remove_containers(client, {"label": label_filter}, report)
    kinds = {"broken", "fork"} | ({"healthy", "project"} if healthy else set()) | ({"base"} if base else set())
    for image in client.images.list(filters={"label": label_filter}):
        kind = (image.labels or {}).get(KIND, "")
        if kind not in kinds:
            continue
        size = int(image.attrs.get("Size", 0))
        try:
            for tag in image.tags or [image.id]:
                client.images.remove(tag, force=True)
            report.images.append(", ".join(image.tags) or image.short_id)
            report.reclaimed += size
        except docker.errors.APIError as exc:
            log.warning("could not remove image %s: %s", image.short_id, exc)
    result = client.images.prune(filters={"dangling": True, "label": label_filter})
    for item in result.get("ImagesDeleted") or []:
        if item.get("Deleted"):
            report.images.append(item["Deleted"][:19])
    report.reclaimed += int(result.get("SpaceReclaimed") or 0)
    return report
