"""The Docker backend: a healthy image per project, a fresh confined container per candidate.

build():  one image per project, commit and build recipe, tagged `miner/healthy-<project.key>`
          and reused by tag. A project with its own Dockerfile ("Dockerized") is built from it
          first; otherwise the image is generated FROM a base image (MINER_BASE_IMAGE, default
          python:3.11-slim, falling back to the bootstrap image miner/base:bookworm). Either way
          the layout stage of miner.sandbox.docker.layout goes on top (the same text the
          exporters write), with the host's pip settings forwarded.
fork():   a container of the healthy image (container.DockerSandbox).
observe(): the system inventory and what a Dockerized service shows (observe.py); derived
          probes of a Dockerized project's image come from probes.py.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import docker
import docker.errors

from miner.models import Probe, Project, TestResult, content_id
from miner.sandbox.base import Backend, BuildError, BuildSpec, Capabilities, Healthy, Limits, Sandbox
from miner.sandbox.docker import gateway, images, layout
from miner.sandbox.docker.container import DockerSandbox, fork_labels, prune_stale
from miner.sandbox.docker.observe import observe
from miner.sandbox.docker.probes import docker_probes, run_docker_probes

log = logging.getLogger(__name__)

RECIPE_VERSION = "6"  # bump when the layout changes, to stop reusing images built by an older one
# The package manager's journal: dpkg and debconf keep the previous database next to the new one
# on every change (a package's status, never its files), so they are no copy of an answer.
PACKAGE_JOURNAL = tuple(f"/var/lib/dpkg/{name}-old" for name in ("status", "available", "diversions", "statoverride")) \
    + tuple(f"/var/cache/debconf/{name}.dat-old" for name in ("config", "templates", "passwords"))
CAPABILITIES = Capabilities(
    scan_roots=("/",),  # the whole container: the system family edits /usr, /etc, the interpreter
    scan_exclude=("/proc", "/sys", "/dev", "/sandbox/.miner", "/tmp/.miner-*", *PACKAGE_JOURNAL),
    network_cut=True,
    cow_forks=True,  # containers are image layers plus a thin writable one
    system=True,
)


def _declares_arg(dockerfile: Path, name: str) -> bool:
    for line in dockerfile.read_text(errors="replace").splitlines():
        words = line.strip().split()
        if len(words) >= 2 and words[0].upper() == "ARG" and words[1].split("=")[0] == name:
            return True
    return False


def copy_project(src: Path, dest: Path) -> None:
    """Copy the project's files into a build context (without .git: the history holds answers)."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))


class DockerBackend(Backend):
    """Healthy images built once per project, forked into confined throwaway containers."""

    name = "docker"

    def __init__(
        self,
        base_image: str | None = None,
        limits: Limits | None = None,
        client: docker.DockerClient | None = None,
        probe_wait: float = 20.0,
    ) -> None:
        self.client = client or images.docker_client()
        self.base_image = base_image
        self.limits = limits
        self.probe_wait = probe_wait
        prune_stale(self.client)

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    # -- build ---------------------------------------------------------------------------

    def build(self, project: Project, spec: BuildSpec, workdir: Path) -> Healthy:
        dockerfile = Path(project.path) / "Dockerfile"
        dockerized = dockerfile.is_file()
        needs_base = not dockerized or _declares_arg(dockerfile, "BASE_IMAGE")
        base = images.resolve_base_image(self.client, self.base_image) if needs_base else ""
        found = gateway.find_image(self.client, base) if base else None
        pip = images.host_pip_settings()
        recipe = content_id(
            RECIPE_VERSION, project.key, found.id if found else "", dockerized, spec.python, spec.install_script,
            spec.env, pip.fingerprint(), length=12,
        )
        tag = f"miner/healthy-{project.key}:{recipe}"
        image = gateway.find_image(self.client, tag)
        if image is None:
            Path(workdir).mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="docker-context-", dir=workdir) as tmp:
                image = self._build_fresh(project, spec, Path(tmp), tag, base, dockerized, pip)
        return self._healthy(project, image, spec.limits)

    def _build_fresh(
        self, project: Project, spec: BuildSpec, ctx: Path, tag: str, base: str, dockerized: bool,
        pip: images.PipSettings,
    ) -> Any:
        memory = spec.limits.memory_mb
        config: dict[str, Any] = {}
        copy_project(Path(project.path), ctx / "project")
        if dockerized:
            project_image = gateway.build_image(
                self.client, context=ctx / "project", tag=f"miner/project-{project.key}:{tag.rsplit(':', 1)[1]}",
                image_labels=images.labels("project", project=project.key), memory_mb=memory,
                buildargs={"BASE_IMAGE": base} if base else None, what=f"the Dockerfile of {project.repo}",
            )
            config = layout.image_config(project_image.attrs)
            base = project_image.id
        (ctx / "build").mkdir()
        for name, text in layout.build_files(spec, dockerized).items():
            (ctx / "build" / name).write_text(text)
        text = layout.healthy_stage(
            base, env=layout.image_env("", dockerized) | pip.env(), project_source="project/", dockerized=dockerized,
            ca_source=images.copy_host_ca(pip, ctx),
        )
        stage = gateway.build_image(self.client, context=ctx, dockerfile_text=text, memory_mb=memory,
                                   image_labels=images.labels("stage", project=project.key),
                                   what=f"the environment of {project.repo}")
        site_packages = self._site_packages(stage.id)
        final_labels = images.labels(
            "healthy", project=project.key, repo=project.repo, commit=project.commit,
            dockerized="1" if dockerized else "0", config=json.dumps(config), site_packages=site_packages,
            base=base,
        )
        return gateway.build_image(self.client, dockerfile_text=layout.site_packages_layer(stage.id, site_packages),
                                  tag=tag, image_labels=final_labels, what="the healthy image")

    def _site_packages(self, image_id: str) -> str:
        """The venv's site-packages, computed once per image (empty when the image has no Python)."""
        code, out, err = gateway.run_once(self.client, image_id, ["-c", layout.SITE_PACKAGES_PROBE], entrypoint=["sh"],
                                          network_mode="none", labels=fork_labels(), user="root")
        if code != 0:
            raise BuildError(f"cannot inspect the built environment: the probe exited {code}", log=err)
        lines = out.strip().splitlines()
        return lines[-1].strip() if lines else ""

    def _healthy(self, project: Project, image: Any, limits: Limits) -> Healthy:
        lab = image.labels or {}
        info = {
            "image": image.id,
            "tag": (image.tags or [""])[0],
            "dockerized": lab.get("miner.dockerized") == "1",
            "config": json.loads(lab.get("miner.config") or "{}"),
            "base": lab.get("miner.base", ""),
            "limits": asdict(self.limits or limits),
            "size": int(image.attrs.get("Size", 0)),
        }
        return Healthy(backend=self.name, ref=image.id, project=project,
                       site_packages=lab.get("miner.site_packages", ""), info=info)

    # -- fork ----------------------------------------------------------------------------

    def _limits(self, healthy: Healthy) -> Limits:
        return Limits(**healthy.info["limits"]) if "limits" in healthy.info else (self.limits or Limits())

    def fork(self, healthy: Healthy) -> DockerSandbox:
        return DockerSandbox(self.client, healthy, healthy.ref, self._limits(healthy), self.probe_wait)

    def fork_image(self, healthy: Healthy, image: str) -> DockerSandbox:
        """A sandbox from another image built on the healthy one (a broken snapshot)."""
        return DockerSandbox(self.client, healthy, image, self._limits(healthy), self.probe_wait)

    def discard(self, healthy: Healthy) -> None:
        """Drop the healthy image's tag; the image goes once no other tag or container uses it."""
        ref = healthy.info.get("tag") or healthy.ref
        try:
            self.client.images.remove(ref)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError as exc:
            log.warning("could not remove %s: %s", ref, exc)

    # -- what only a container shows ------------------------------------------------------

    def derived_probes(self, healthy: Healthy) -> list[Probe]:
        """A Dockerized project's CMD, HEALTHCHECK and HTTP ports, measured twice (see probes.py)."""
        if not healthy.info.get("dockerized"):
            return []
        with self.fork(healthy) as box:
            return docker_probes(box)

    def run_derived_probes(self, sandbox: Sandbox, probes: list[Probe]) -> dict[str, TestResult]:
        return run_docker_probes(sandbox, probes)

    def observe(self, healthy: Healthy) -> dict[str, Any]:
        """The system inventory and, for a Dockerized service, what it showed (see observe.py)."""
        with self.fork(healthy) as box:
            return observe(box)

    def build_broken(self, healthy: Healthy, break_script: str) -> images.BrokenImage:
        """The broken snapshot (healthy image + break script layer) and its storage overhead."""
        return images.build_broken_image(self.client, healthy.ref, break_script)
