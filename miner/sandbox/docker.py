"""The Docker sandbox backend: a healthy image per project, a fresh container per candidate.

build():  one image per project, commit and build recipe, tagged `miner/healthy-<project.key>`
          and reused by tag. A project with its own Dockerfile ("Dockerized") is built from it
          first; otherwise the image is generated FROM a base image (MINER_BASE_IMAGE, default
          python:3.11-slim, falling back to the bootstrap image miner/base:bookworm). Either way
          a layer on top lays out /sandbox/project, /sandbox/venv and /sandbox/env.sh like the
          local backend and runs miner.install's script with the host's pip settings forwarded.
fork():   a container from the healthy image running `sleep infinity` under an init process,
          all capabilities dropped, no-new-privileges, memory / CPU / pids limits, and no network:
          it is created on the default bridge and disconnected before it starts; a command run
          with network=True reconnects it for that command only (and disconnects afterwards).
run():    `docker exec` of bash -c 'source /sandbox/env.sh; cd $MINER_PROJECT; CMD' under
          coreutils `timeout` (kills the whole process group), with a host-side guard that kills
          the container when even that does not end the command.

Everything is labelled (see miner.images); containers of this process are removed on close(),
at exit and on SIGTERM, and leftovers of dead processes are pruned when a backend starts.

Dockerized projects also get derived probes from their image (`docker_probes`,
`run_docker_probes`): the one-shot CMD's exit code and output digest, the HEALTHCHECK answer
and each EXPOSEd port's HTTP status and body digest, all measured inside the container.
`system_inventory` lists the shared libraries and Debian packages the Python environment uses.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import io
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from miner import images
from miner.models import (
    ENV_FILE, PROJECT_DIR, SANDBOX_ROOT, VENV_DIR, Probe, Project, RunResult, Target, TestResult, content_id,
)
from miner.sandbox.base import Backend, BackendUnavailable, BuildError, BuildSpec, Healthy, Limits, Sandbox, SandboxError
from miner.sandbox.local import render_env_file

log = logging.getLogger(__name__)

RECIPE_VERSION = "4"  # bump when the generated Dockerfiles change, to stop reusing old images
HOME_DIR = f"{SANDBOX_ROOT}/home"
SANDBOX_PATH = f"{VENV_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MINER_ENV = {
    "MINER_PROJECT": PROJECT_DIR,
    "MINER_VENV": VENV_DIR,
    "MINER_PYTHON": f"{VENV_DIR}/bin/python",
    "MINER_ENV_FILE": ENV_FILE,
}
MAX_OUTPUT = 2_000_000  # characters of command output kept (the tail), as the local backend
GUARD_SECONDS = 20  # extra wall time before the host kills a container whose command will not end
SERVICE_PIDFILE = "/tmp/.service.pid"
SERVICE_LOG = "/tmp/.service.log"
PROBE_TIMEOUT = 120.0
INLINE_LIMIT = 64 * 1024  # longer commands (fix scripts embedding originals) go through a file

SESSION = uuid.uuid4().hex[:12]
_HOST = socket.gethostname()


# --- cleanup of everything this process created ------------------------------------------


class _Registry:
    """Containers this process created, removed at exit or on SIGTERM even if close() never ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.containers: dict[str, docker.DockerClient] = {}
        self.installed = False

    def add(self, client: docker.DockerClient, container_id: str) -> None:
        with self.lock:
            self.containers[container_id] = client
            if not self.installed:
                atexit.register(self.cleanup)
                _install_sigterm()
                self.installed = True

    def discard(self, container_id: str) -> None:
        with self.lock:
            self.containers.pop(container_id, None)

    def cleanup(self) -> None:
        with self.lock:
            items = list(self.containers.items())
            self.containers.clear()
        for cid, client in items:
            try:
                client.api.remove_container(cid, force=True, v=True)
            except Exception:  # best effort at exit: the next backend start prunes the rest
                pass


REGISTRY = _Registry()


def _install_sigterm() -> None:
    """Turn SIGTERM into SystemExit (so finally blocks and atexit run) unless someone handles it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def fork_labels(**extra: str) -> dict[str, str]:
    return images.labels("fork", session=SESSION, pid=str(os.getpid()), host=_HOST, **extra)


def prune_stale(client: docker.DockerClient) -> images.PruneReport:
    """Remove fork containers left by miner processes of this host that are no longer alive."""
    report = images.PruneReport()
    images.remove_containers(client, {"label": [f"{images.LABEL}=1", f"{images.KIND}=fork"]}, report, only_stale=True)
    return report


# --- the healthy image -----------------------------------------------------------------------


GENERATED = """\
FROM {base}
LABEL miner=1 miner.kind=healthy
USER root
{pip_lines}
ENV MINER_PROJECT={project} MINER_VENV={venv} MINER_PYTHON={venv}/bin/python MINER_ENV_FILE={env_file} \\
    VIRTUAL_ENV={venv} HOME={home} LANG=C.UTF-8 PATH={path}
COPY project/ {project}/
COPY env.sh {env_file}
COPY install.sh /tmp/miner-install.sh
RUN set -e; mkdir -p {home}; cd {project}; {python} -m venv {venv}; \\
    bash -c 'set -e; source {venv}/bin/activate; source /tmp/miner-install.sh'; \\
    rm -f /tmp/miner-install.sh /var/cache/apt/archives/*.deb; {venv}/bin/python -m compileall -q -j 0 {project} {venv}/lib >/dev/null 2>&1 || true
"""

# A Dockerized project: its WORKDIR (where its files are) becomes /sandbox/project (with a
# symlink left at the old place), so the project is exactly what its image holds (files its
# Dockerfile removed stay removed). An image without a WORKDIR gets the project's files copied.
# A venv that sees the image's own packages gets the test tooling; no Python: an empty venv.
DOCKERIZED = """\
FROM {base}
LABEL miner=1 miner.kind=healthy
USER root
{pip_lines}
ENV MINER_PROJECT={project} MINER_VENV={venv} MINER_PYTHON={venv}/bin/python MINER_ENV_FILE={env_file} \\
    VIRTUAL_ENV={venv} HOME={home} PATH={path}
COPY project/ /tmp/miner-project/
COPY env.sh {env_file}
COPY install.sh /tmp/miner-install.sh
RUN set -e; mkdir -p {root} {home}; wd={workdir}; \\
    if [ -n "$wd" ] && [ "$wd" != / ] && [ -d "$wd" ] && [ ! -e {project} ]; then \\
        mv "$wd" {project} && ln -s {project} "$wd"; fi; \\
    if [ ! -e {project} ]; then mkdir -p {project}; cp -r /tmp/miner-project/. {project}/; fi; \\
    rm -rf /tmp/miner-project; \\
    if command -v {python} >/dev/null 2>&1; then \\
        {python} -m venv --system-site-packages {venv}; \\
        cd {project}; bash -c 'set -e; source {venv}/bin/activate; source /tmp/miner-install.sh'; \\
    else mkdir -p {venv}/bin; fi; \\
    rm -f /tmp/miner-install.sh /var/cache/apt/archives/*.deb; {venv}/bin/python -m compileall -q -j 0 {project} {venv}/lib >/dev/null 2>&1 || true
"""

FINAL = """\
FROM {stage}
ENV MINER_SITE_PACKAGES={site_packages}
"""

IMAGE_CONFIG_KEYS = ("Cmd", "Entrypoint", "WorkingDir", "User", "ExposedPorts", "Healthcheck", "Env")


def _declares_arg(dockerfile: Path, name: str) -> bool:
    for line in dockerfile.read_text(errors="replace").splitlines():
        words = line.strip().split()
        if len(words) >= 2 and words[0].upper() == "ARG" and words[1].split("=")[0] == name:
            return True
    return False


def _image_config(image: Any) -> dict[str, Any]:
    config = image.attrs.get("Config") or {}
    return {key: config.get(key) for key in IMAGE_CONFIG_KEYS}


def image_facts(config: dict[str, Any]) -> dict[str, Any]:
    """What running a Dockerized project's image needs of its config (Docker's "Config" keys):
    command (ENTRYPOINT + CMD), workdir, user, EXPOSEd TCP ports, HEALTHCHECK test ([] if none)."""
    ports = []
    for spec in (config.get("ExposedPorts") or {}):
        number, _, proto = spec.partition("/")
        if (proto or "tcp") == "tcp" and number.isdigit():
            ports.append(int(number))
    test = list((config.get("Healthcheck") or {}).get("Test") or [])
    return {
        "command": list(config.get("Entrypoint") or []) + list(config.get("Cmd") or []),
        "workdir": config.get("WorkingDir") or "/",
        "user": config.get("User") or "root",
        "ports": sorted(ports),
        "healthcheck": test if test and test[0] != "NONE" else [],
    }


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

    # -- build ---------------------------------------------------------------------------

    def build(self, project: Project, spec: BuildSpec, workdir: Path) -> Healthy:
        dockerfile = Path(project.path) / "Dockerfile"
        dockerized = dockerfile.is_file()
        needs_base = not dockerized or _declares_arg(dockerfile, "BASE_IMAGE")
        base = images.resolve_base_image(self.client, self.base_image) if needs_base else ""
        base_id = images.find_image(self.client, base).id if base else ""
        pip = images.host_pip_settings()
        recipe = content_id(
            RECIPE_VERSION, project.key, base_id, dockerized, spec.python, spec.install_script, spec.env,
            pip.fingerprint(), length=12,
        )
        tag = f"miner/healthy-{project.key}:{recipe}"
        image = images.find_image(self.client, tag)
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
            args = {"BASE_IMAGE": base} if base else None
            project_image = images.build_image(
                self.client, context=ctx / "project", tag=f"miner/project-{project.key}:{tag.rsplit(':', 1)[1]}",
                image_labels=images.labels("project", project=project.key), buildargs=args, memory_mb=memory,
                what=f"the Dockerfile of {project.repo}",
            )
            config = _image_config(project_image)
            base = project_image.id
        (ctx / "env.sh").write_text(render_env_file(spec.env))
        (ctx / "install.sh").write_text(spec.install_script or "true\n")
        template = DOCKERIZED if dockerized else GENERATED
        text = template.format(
            base=base, pip_lines="\n".join(images.pip_dockerfile_lines(pip, ctx)), project=PROJECT_DIR,
            venv=VENV_DIR, env_file=ENV_FILE, home=HOME_DIR, path=SANDBOX_PATH, root=SANDBOX_ROOT,
            python=shlex.quote(spec.python), workdir=shlex.quote(config.get("WorkingDir") or ""),
        )
        stage = images.build_image(
            self.client, context=ctx, dockerfile_text=text, memory_mb=memory,
            image_labels=images.labels("stage", project=project.key), what=f"the environment of {project.repo}",
        )
        site_packages = self._site_packages(stage.id)
        final_labels = images.labels(
            "healthy", project=project.key, repo=project.repo, commit=project.commit,
            dockerized="1" if dockerized else "0", config=json.dumps(config), site_packages=site_packages,
            base=base,
        )
        return images.build_image(
            self.client, dockerfile_text=FINAL.format(stage=stage.id, site_packages=site_packages or '""'),
            tag=tag, image_labels=final_labels, what="the healthy image",
        )

    def _site_packages(self, image_id: str) -> str:
        """The venv's site-packages, computed once per image (empty when the image has no Python)."""
        code = "import sysconfig; print(sysconfig.get_path('purelib'))"
        script = f"if [ -x {VENV_DIR}/bin/python ]; then {VENV_DIR}/bin/python -c \"{code}\"; fi"
        try:
            out = self.client.containers.run(
                image_id, ["-c", script], entrypoint=["sh"], remove=True, network_mode="none",
                labels=fork_labels(), user="root",
            )
        except docker.errors.ContainerError as exc:
            raise BuildError(f"cannot inspect the built environment: {exc}", log=str(exc.stderr or "")) from exc
        lines = out.decode(errors="replace").strip().splitlines()
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

    def healthy_from_image(self, ref: str, project: Project) -> Healthy:
        """A Healthy for an existing healthy image (e.g. rebuilt by replay or an exporter)."""
        image = self.client.images.get(ref)
        return self._healthy(project, image, self.limits or Limits())

    # -- fork ----------------------------------------------------------------------------

    def fork(self, healthy: Healthy) -> DockerSandbox:
        limits = Limits(**healthy.info["limits"]) if "limits" in healthy.info else (self.limits or Limits())
        return DockerSandbox(self.client, healthy, healthy.ref, limits, self.probe_wait)

    def fork_image(self, healthy: Healthy, image: str) -> DockerSandbox:
        """A sandbox from another image built on the healthy one (a broken snapshot)."""
        limits = Limits(**healthy.info["limits"]) if "limits" in healthy.info else (self.limits or Limits())
        return DockerSandbox(self.client, healthy, image, limits, self.probe_wait)

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
        """A Dockerized project's CMD, HEALTHCHECK and HTTP ports, measured twice (see docker_probes)."""
        if not healthy.info.get("dockerized"):
            return []
        with self.fork(healthy) as box:
            return docker_probes(box)

    def run_derived_probes(self, sandbox: Sandbox, probes: list[Probe]) -> dict[str, TestResult]:
        return run_docker_probes(sandbox, probes)

    def backend_targets(self, healthy: Healthy) -> tuple[dict[str, Any] | None, list[Target]]:
        """The system inventory (minus nothing: it is small) and the system and service targets."""
        with self.fork(healthy) as box:
            inventory = system_inventory(box)
            return inventory, system_targets(box, inventory) + service_targets(box)

    def build_broken(self, healthy: Healthy, break_script: str) -> images.BrokenImage:
        """The broken snapshot (healthy image + break script layer) and its storage overhead."""
        return images.build_broken_image(self.client, healthy.ref, break_script)


def copy_project(src: Path, dest: Path) -> None:
    """Copy the project's files into a build context (without .git: the history holds answers)."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))


# --- a running fork --------------------------------------------------------------------------


class DockerSandbox(Sandbox):
    """One container from a healthy (or broken) image."""

    def __init__(self, client: docker.DockerClient, healthy: Healthy, image: str, limits: Limits,
                 probe_wait: float = 20.0) -> None:
        self.client = client
        self.healthy = healthy
        self.limits = limits
        self.probe_wait = probe_wait
        self.closed = False
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docker-exec")
        self.env = {**MINER_ENV, "MINER_SITE_PACKAGES": healthy.site_packages}
        self.container: Container = client.containers.create(
            image,
            entrypoint=["sleep"],
            command=["infinity"],
            init=True,
            user="root",
            working_dir=PROJECT_DIR,
            hostname="sandbox",
            labels=fork_labels(healthy=healthy.ref[:19]),
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.processes,
            network_mode="bridge",
        )
        REGISTRY.add(client, self.container.id)
        try:
            self._network().disconnect(self.container)
            self.container.start()
            probe = self._exec(["sh", "-c", "command -v timeout >/dev/null && command -v bash >/dev/null"], timeout=60)
            self.has_timeout = probe[0] == 0
        except BaseException:
            self.close()
            raise

    def _network(self) -> Any:
        return self.client.networks.get("bridge")

    # -- commands ------------------------------------------------------------------------

    def _exec(
        self, argv: list[str], *, timeout: float, user: str = "root", workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> tuple[int, str, bool]:
        """(exit code, output, killed by the host guard) of one exec in the container."""
        api = self.client.api
        exec_id = api.exec_create(
            self.container.id, argv, stdout=True, stderr=True, user=user or "root",
            workdir=workdir, environment={**self.env, **(env or {})},
        )["Id"]
        future = self.pool.submit(api.exec_start, exec_id)
        try:
            raw = future.result(timeout=timeout + GUARD_SECONDS)
        except FutureTimeout:
            log.warning("command still running after %.0fs: killing container %s", timeout, self.location)
            self._restart()
            return -int(signal.SIGKILL), "", True
        code = api.exec_inspect(exec_id).get("ExitCode")
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        return (code if code is not None else -1), text[-MAX_OUTPUT:], False

    def _restart(self) -> None:
        """Kill every process of the container and start it again (files persist), still offline."""
        try:
            self.container.kill()
            self.container.start()
            self._disconnect()
        except docker.errors.APIError as exc:
            log.warning("could not restart container %s: %s", self.location, exc)

    def _timed(self, argv: list[str], timeout: float) -> list[str]:
        if not self.has_timeout:
            return argv
        return ["timeout", "-k", "5", str(max(1, math.ceil(timeout))), *argv]

    def run(self, command: str, *, network: bool = False, timeout: float | None = None) -> RunResult:
        if self.closed:
            raise SandboxError(f"sandbox {self.location} is closed")
        limit = timeout if timeout is not None else self.limits.timeout
        spool = None
        if len(command.encode()) > INLINE_LIMIT:  # beyond what one argv string may hold
            spool = f"/tmp/.miner-command-{uuid.uuid4().hex[:12]}.sh"
            self.put(spool, command.encode(), mode=0o600)
            command_text = f"source {spool}"
        else:
            command_text = command
        script = f'source {ENV_FILE}; cd "$MINER_PROJECT"; {command_text}'
        start = time.monotonic()
        if network:
            self._network().connect(self.container)
        try:
            code, output, killed = self._exec(self._timed(["bash", "-c", script], limit), timeout=limit)
        finally:
            if network and not self.closed:
                self._disconnect()
            if spool and not self.closed:
                self._exec(["rm", "-f", spool], timeout=60)
        duration = time.monotonic() - start
        timed_out = killed or (self.has_timeout and code in (124, 137) and duration >= limit - 0.5)
        return RunResult(command=command, exit_code=code, output=output, duration=round(duration, 3),
                         timed_out=timed_out)

    def _disconnect(self) -> None:
        try:
            self._network().disconnect(self.container, force=True)
        except docker.errors.APIError as exc:
            if "is not connected" not in str(exc):
                raise

    # -- files ---------------------------------------------------------------------------

    def read(self, path: str) -> bytes | None:
        for _ in range(16):  # follow symlinks inside the container, as open() would
            try:
                stream, _stat = self.container.get_archive(path)
            except docker.errors.NotFound:
                return None
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                if member is None:
                    return None
                if member.issym():
                    path = os.path.normpath(os.path.join(os.path.dirname(path), member.linkname))
                    continue
                if member.isdir():
                    raise IsADirectoryError(path)
                handle = tar.extractfile(member)
                return handle.read() if handle else None
        raise OSError(f"too many levels of symbolic links: {path}")

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        parent, name = os.path.split(os.path.normpath(path))
        code, out, _ = self._exec(["mkdir", "-p", parent or "/"], timeout=60)
        if code != 0:
            raise OSError(f"cannot create {parent}: {out.strip()}")
        if not self.container.put_archive(parent or "/", images.tar_one(name, data, mode)):
            raise OSError(f"cannot write {path}")

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        finally:
            REGISTRY.discard(self.container.id)
            self.pool.shutdown(wait=False, cancel_futures=True)

    @property
    def location(self) -> str:
        return self.container.short_id

    def shell(self) -> None:
        subprocess.run(["docker", "exec", "-it", "-w", PROJECT_DIR, self.container.id,
                        "bash", "--rcfile", ENV_FILE, "-i"], check=False)

    # -- the image's own service or command (Dockerized projects) -------------------------

    @property
    def image(self) -> dict[str, Any]:
        """The image's command, workdir, user, ports and health check (see image_facts)."""
        return image_facts(self.healthy.info.get("config") or {})

    def image_command(self) -> list[str]:
        """The image's ENTRYPOINT + CMD as one argv (empty when it has neither)."""
        return self.image["command"]

    def ports(self) -> list[int]:
        """EXPOSEd TCP ports of the image."""
        return self.image["ports"]

    def image_user(self) -> str:
        return self.image["user"]

    def image_workdir(self) -> str:
        return self.image["workdir"]

    def run_image_command(self, timeout: float = PROBE_TIMEOUT) -> tuple[int, str]:
        """Run the image's CMD once, as the image would (its user and workdir), env file sourced."""
        argv = self.image_command()
        script = f"source {ENV_FILE}; cd {shlex.quote(self.image_workdir())}; exec {shlex.join(argv)}"
        code, out, _ = self._exec(self._timed(["bash", "-c", script], timeout), timeout=timeout,
                                  user=self.image_user())
        return code, out

    def start_service(self, env: dict[str, str] | None = None) -> bool:
        """Start the image's CMD in the background (own session); wait until its ports answer."""
        argv = self.image_command()
        if not argv:
            return False
        script = (f"echo $$ > {SERVICE_PIDFILE}; source {ENV_FILE}; cd {shlex.quote(self.image_workdir())}; "
                  f"exec {shlex.join(argv)} >{SERVICE_LOG} 2>&1")
        api = self.client.api
        exec_id = api.exec_create(self.container.id, ["setsid", "bash", "-c", script], user=self.image_user(),
                                  environment={**self.env, **(env or {})})["Id"]
        api.exec_start(exec_id, detach=True)
        return self.wait_ports(self.probe_wait)

    def wait_ports(self, seconds: float) -> bool:
        """True once every EXPOSEd port accepts connections; False if the service died or time ran out."""
        ports = self.ports()
        if not ports:
            return True
        checks = " && ".join(f"(exec 3<>/dev/tcp/127.0.0.1/{p}) 2>/dev/null" for p in ports)
        rounds = max(1, int(seconds / 0.25))
        script = (f"for i in $(seq {rounds}); do {checks} && exit 0; "
                  f"[ -s {SERVICE_PIDFILE} ] && ! kill -0 $(cat {SERVICE_PIDFILE}) 2>/dev/null && exit 3; "
                  f"sleep 0.25; done; exit 2")
        code, _, _ = self._exec(["bash", "-c", script], timeout=seconds + 10)
        return code == 0

    def service_log(self) -> str:
        data = self.read(SERVICE_LOG)
        return data.decode(errors="replace") if data else ""

    def stop_service(self) -> None:
        script = (f"[ -s {SERVICE_PIDFILE} ] || exit 0; p=$(cat {SERVICE_PIDFILE}); kill -TERM -- -$p 2>/dev/null; "
                  "for i in $(seq 20); do kill -0 -- -$p 2>/dev/null || break; sleep 0.1; done; "
                  f"kill -KILL -- -$p 2>/dev/null; rm -f {SERVICE_PIDFILE} {SERVICE_LOG}; true")
        self._exec(["bash", "-c", script], timeout=30)

    def http_get(self, port: int, path: str = "/", timeout: float = 10.0) -> tuple[int, bytes] | None:
        """(status, body) of GET http://127.0.0.1:port/path from inside the container, or None."""
        request = f"GET {path} HTTP/1.0\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n"
        script = (f"exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7; printf '{request}' >&3; "
                  "base64 -w0 <&3")
        code, out, _ = self._exec(self._timed(["bash", "-c", script], timeout), timeout=timeout)
        if code != 0:
            return None
        try:
            raw = base64.b64decode(out.strip().splitlines()[-1] if out.strip() else "")
        except ValueError:
            return None
        head, sep, body = raw.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].split()
        if not sep or len(status_line) < 2 or not status_line[0].startswith(b"HTTP/") or not status_line[1].isdigit():
            return None
        return int(status_line[1]), body

    def healthcheck(self, timeout: float = 30.0) -> tuple[int, str] | None:
        """Run the image's HEALTHCHECK test once, as Docker would: (exit code, output), or None."""
        test = self.image["healthcheck"]
        if not test:
            return None
        argv = ["/bin/sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:] if test[0] == "CMD" else test
        code, out, _ = self._exec(self._timed(argv, timeout), timeout=timeout, user=self.image_user(),
                                  workdir=self.image_workdir())
        return code, out


# --- derived probes of Dockerized projects ---------------------------------------------------


def digest(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def _measure_service(sandbox: DockerSandbox) -> dict[str, tuple[int, str | None]]:
    """Start the service, measure healthcheck and each port's HTTP answer, stop it."""
    found: dict[str, tuple[int, str | None]] = {}
    try:
        if not sandbox.start_service():
            return found
        check = _healthcheck_with_retries(sandbox)
        if check is not None:
            found["probe::healthcheck"] = (check[0], None)
        for port in sandbox.ports():
            answer = sandbox.http_get(port)
            if answer is not None:
                found[f"probe::http::{port}/"] = (answer[0], digest(answer[1]))
    finally:
        sandbox.stop_service()
    return found


def _healthcheck_with_retries(sandbox: DockerSandbox, attempts: int = 5) -> tuple[int, str] | None:
    result = None
    for _ in range(attempts):
        result = sandbox.healthcheck()
        if result is None or result[0] == 0:
            return result
        time.sleep(1)
    return result


def _measure(sandbox: DockerSandbox) -> dict[str, tuple[int, str | None]]:
    if not sandbox.image_command():
        return {}
    if sandbox.ports():
        return _measure_service(sandbox)
    code, out = sandbox.run_image_command()
    found: dict[str, tuple[int, str | None]] = {"probe::cmd": (code, digest(out))}
    check = sandbox.healthcheck()
    if check is not None:
        found["probe::healthcheck"] = (check[0], None)
    return found


def docker_probes(sandbox: Sandbox) -> list[Probe]:
    """Probes derived from a Dockerized project's image, measured twice on a healthy sandbox.

    One-shot images: `probe::cmd` (exit code + output digest of ENTRYPOINT/CMD). Services (images
    that EXPOSE ports): `probe::http::<port>/` (HTTP status in expected_exit, body digest) for
    each port that answers HTTP, and `probe::healthcheck` (exit code of HEALTHCHECK). Probes whose
    two measurements differ (output with timestamps, ...) are left out. Other sandboxes: [].
    """
    if not isinstance(sandbox, DockerSandbox) or not sandbox.healthy.info.get("dockerized"):
        return []
    first, second = _measure(sandbox), _measure(sandbox)
    probes = []
    for probe_id, (code, dig) in first.items():
        if second.get(probe_id) != (code, dig):
            log.info("%s is not stable (%s vs %s): left out", probe_id, (code, dig), second.get(probe_id))
            continue
        if probe_id.startswith("probe::http::"):
            port = int(probe_id.split("::")[2].rstrip("/"))
            probes.append(Probe(id=probe_id, kind="http", url=f"http://127.0.0.1:{port}/",
                                argv=sandbox.image_command(), expected_exit=code, expected_digest=dig))
        elif probe_id == "probe::cmd":
            probes.append(Probe(id=probe_id, kind="command", argv=sandbox.image_command(),
                                expected_exit=code, expected_digest=dig))
        else:
            probes.append(Probe(id=probe_id, kind="command", argv=sandbox.image["healthcheck"], expected_exit=code))
    return sorted(probes, key=lambda p: p.id)


def _result(probe: Probe, got: tuple[int, str | None] | None, seconds: float, detail: str) -> TestResult:
    if got is not None and got[0] == probe.expected_exit and (probe.expected_digest in (None, got[1])):
        return TestResult(id=probe.id, outcome="passed", duration=round(seconds, 3))
    if got is None:
        why = "no answer" if probe.kind == "http" else "did not run"
    elif got[0] != probe.expected_exit:
        what = "HTTP status" if probe.kind == "http" else "exit code"
        why = f"{what} {got[0]}, expected {probe.expected_exit}"
    else:
        why = "output differs from the healthy output"
    message = "\n".join([why, *detail.strip().splitlines()[-10:]])
    return TestResult(id=probe.id, outcome="failed", duration=round(seconds, 3), message=message)


def run_docker_probes(sandbox: Sandbox, probes: list[Probe]) -> dict[str, TestResult]:
    """Check Docker-derived probes (those of `docker_probes`) on a sandbox; other probes are ignored."""
    mine = [p for p in probes if p.id == "probe::cmd" or p.id == "probe::healthcheck" or p.id.startswith("probe::http::")]
    if not mine:
        return {}
    if not isinstance(sandbox, DockerSandbox):
        return {p.id: TestResult(id=p.id, outcome="missing", message="needs the docker backend") for p in mine}
    results: dict[str, TestResult] = {}
    start = time.monotonic()
    if sandbox.ports():
        started = False
        try:
            started = sandbox.start_service()
            log_text = "" if started else "the service did not come up:\n" + sandbox.service_log()
            for probe in mine:
                t0 = time.monotonic()
                if probe.kind == "http":
                    port = int(probe.id.split("::")[2].rstrip("/"))
                    answer = sandbox.http_get(port) if started else None
                    got = (answer[0], digest(answer[1])) if answer else None
                    results[probe.id] = _result(probe, got, time.monotonic() - t0, log_text)
                elif probe.id == "probe::healthcheck":
                    check = _healthcheck_with_retries(sandbox) if started else sandbox.healthcheck()
                    got = (check[0], None) if check else None
                    results[probe.id] = _result(probe, got, time.monotonic() - t0,
                                                log_text + (check[1] if check else ""))
        finally:
            sandbox.stop_service()
    for probe in mine:
        if probe.id == "probe::cmd":
            t0 = time.monotonic()
            code, out = sandbox.run_image_command()
            results[probe.id] = _result(probe, (code, digest(out)), time.monotonic() - t0, out)
        elif probe.id == "probe::healthcheck" and probe.id not in results:
            check = sandbox.healthcheck()
            results[probe.id] = _result(probe, (check[0], None) if check else None, 0.0, check[1] if check else "")
    log.debug("docker probes took %.1fs", time.monotonic() - start)
    return results


# --- system inventory and captured originals -------------------------------------------------

INVENTORY_PY = r'''
import json, os, re, subprocess, sys, sysconfig
roots = []
site = os.environ.get("MINER_SITE_PACKAGES") or sysconfig.get_path("purelib")
if site and os.path.isdir(site):
    roots.append(("site-packages", site))
roots += [("stdlib", p) for p in sys.path if p.endswith("lib-dynload") and os.path.isdir(p)]
SUFFIX = re.compile(r"(\.cpython-[^.]*|\.abi3|\.pypy[^.]*)?\.so$")
LINE = re.compile(r"^\s*(\S+)\s+=>\s+(\S+|not found)")

def ldd(path):
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [m.groups() for m in map(LINE.match, out.splitlines()) if m]

libraries, extensions = {}, {}
def note(user, module, path):
    for soname, where in ldd(path):
        entry = libraries.setdefault(soname, {"soname": soname, "linked": where, "path": None, "used_by": [], "modules": []})
        if where != "not found":
            entry["path"] = os.path.realpath(where)
        entry["used_by"].append(user)
        if module and module not in entry["modules"]:
            entry["modules"].append(module)
        extensions.setdefault(user, {"module": module, "libraries": []})["libraries"].append(soname)

for origin, root in roots:
    for folder, dirs, files in os.walk(root):
        for name in files:
            if not re.search(r"\.so(\.\d+)*$", name):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            module = SUFFIX.sub("", rel).replace(os.sep, ".") if SUFFIX.search(rel) else None
            note(path, module, path)
note("interpreter", None, os.path.realpath(sys.executable))

def owners(paths):
    found = {}
    for path in sorted(set(paths)):
        alt = path[4:] if path.startswith("/usr/") else "/usr" + path
        for candidate in (path, alt):
            out = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
            if out.returncode == 0 and ": " in out.stdout:
                found[path] = out.stdout.split(": ", 1)[0].split(",")[0].strip()
                break
    return found

has_dpkg = subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode == 0
owner = owners([e["path"] for e in libraries.values() if e["path"]]) if has_dpkg else {}
packages = {}
for entry in libraries.values():
    pkg = owner.get(entry["path"])
    entry["package"] = pkg
    if pkg:
        packages.setdefault(pkg, {"name": pkg, "libraries": []})["libraries"].append(entry["soname"])
for pkg, entry in packages.items():
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True)
    entry["version"] = out.stdout.strip()

def link(path):
    return {"path": path, "target": os.readlink(path) if os.path.islink(path) else None, "exists": os.path.exists(path)}
ZONE = re.compile(r"\b(?:Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|Pacific)/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?\b")
zones = set()
for folder, dirs, files in os.walk(os.environ.get("MINER_PROJECT", "/sandbox/project")):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
    for name in files:
        path = os.path.join(folder, name)
        if name.endswith((".pyc", ".so")) or os.path.islink(path) or os.path.getsize(path) > 262144:
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        zones.update(z for z in ZONE.findall(text) if os.path.isfile("/usr/share/zoneinfo/" + z))
import ast
names = set()
project = os.environ.get("MINER_PROJECT", "/sandbox/project")
for folder, dirs, files in os.walk(project):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
    for name in files:
        if name.endswith(".py"):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    tree = ast.parse(handle.read())
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
LOADER = """
import importlib, sys
try:
    importlib.import_module(sys.argv[1])
except BaseException:
    pass
files = sorted({m.__file__ for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").endswith(".so")})
import json  # after the measure: json's own extension is not the import's
print("LOADED " + json.dumps(files))
"""
# Each name in its own interpreter, so that what an import loads is known per name (the graph
# links `import sqlite3` to libsqlite3 through _sqlite3's extension file).
import_loads = {}
for name in sorted(names):
    try:
        out = subprocess.run([sys.executable, "-c", LOADER, name], cwd=project,
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        continue
    for line in out.stdout.splitlines():
        if line.startswith("LOADED ") and json.loads(line[7:]):
            import_loads[name] = [os.path.realpath(p) for p in json.loads(line[7:])]
loaded = sorted({p for paths in import_loads.values() for p in paths})
venv = os.environ.get("MINER_VENV", "/sandbox/venv")
system = {
    "python_symlink": link("/usr/bin/python3"),
    "venv_python": link(os.path.join(venv, "bin", "python")),
    "ca_bundle": link("/etc/ssl/certs/ca-certificates.crt"),
    "locale": link("/usr/lib/locale/C.utf8/LC_CTYPE"),
    "zoneinfo": link("/usr/share/zoneinfo"),
    "ld_so_conf": link("/etc/ld.so.conf"),
}
print("MINER-INVENTORY " + json.dumps({"libraries": libraries, "packages": packages,
                                       "extensions": extensions, "system": system, "dpkg": has_dpkg,
                                       "zones": sorted(zones), "imports": sorted(names), "loaded": loaded,
                                       "import_loads": import_loads}))
'''


def system_inventory(sandbox: Sandbox) -> dict[str, Any]:
    """Shared libraries loaded by extension modules (and the interpreter), their Debian packages.

    Returns {"libraries": {soname: {soname, path, linked, package, used_by, modules}},
             "packages": {name: {name, version, libraries}},
             "extensions": {so path or "interpreter": {module, libraries}},
             "system": {python_symlink|venv_python|ca_bundle|locale|zoneinfo|ld_so_conf: {path, target, exists}},
             "zones": [time zones the project's files name that exist in /usr/share/zoneinfo],
             "imports": [top-level modules the project's .py files import],
             "loaded": [extension module files (.so) loaded once those modules are imported],
             "import_loads": {top-level import name: [extension files importing it loads]},
             "dpkg": bool}
    Modules are dotted import names ("_sqlite3", "pkg._speedups"); "interpreter" is python itself.
    """
    script = f"PY=\"$MINER_PYTHON\"; [ -x \"$PY\" ] || PY=python3; \"$PY\" - <<'MINER_EOF'\n{INVENTORY_PY}\nMINER_EOF"
    result = sandbox.run(script, timeout=300)
    for line in reversed(result.output.splitlines()):
        if line.startswith("MINER-INVENTORY "):
            return json.loads(line.split(" ", 1)[1])
    raise SandboxError(f"system inventory failed (exit {result.exit_code}): {result.output[-2000:]}")


REPACK = r'''
set -euo pipefail
pkg={pkg}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir -p "$d/root/DEBIAN"
dpkg-query -L "$pkg" | while IFS= read -r f; do
  if [ -L "$f" ] || [ -f "$f" ]; then printf '%s\n' "${{f#/}}"; fi
done > "$d/files"
tar -C / -cf - --no-recursion -T "$d/files" | tar -C "$d/root" -xf -
dpkg-query -s "$pkg" | awk '/^(Status|Conffiles):/ {{skip=1; next}} /^[^ ]/ {{skip=0}} !skip' > "$d/root/DEBIAN/control"
info=$(dpkg-query -W -f '${{db:Status-Abbrev}}' "$pkg" >/dev/null; ls /var/lib/dpkg/info/ | grep -E "^$pkg(:[a-z0-9]+)?\.(preinst|postinst|prerm|postrm|shlibs|symbols|triggers|conffiles|templates|config)$" || true)
for f in $info; do cp -a "/var/lib/dpkg/info/$f" "$d/root/DEBIAN/${{f##*.}}"; done
dpkg-deb --build --root-owner-group "$d/root" "$d/pkg.deb" >/dev/null
echo "MINER-DEB $(base64 -w0 "$d/pkg.deb")"
'''


# Libraries every process needs: breaking them breaks the shell that would run the fix.
CORE_LIBRARIES = ("libc.so", "ld-linux", "libm.so", "libpthread", "libdl.so", "librt.so", "libutil.so",
                  "libgcc_s", "libtinfo", "libselinux", "libpcre2", "libacl", "libattr", "libcrypt.so", "libz.so")
MAX_CAPTURE = 2_000_000  # bytes of an original embedded in a fix script
CONFIG_SUFFIXES = (".ini", ".cfg", ".conf", ".toml", ".yaml", ".yml", ".json", ".env")
ASSIGNMENT = re.compile(r"""^(?P<head>\s*["']?(?P<key>[A-Za-z_][\w.-]*)["']?\s*[:=]\s*["']?)(?P<value>[^"'#\n]*?)(?P<tail>["']?\s*,?\s*)$""")


def b64_lines(data: bytes) -> str:
    """Base64 wrapped at 76 columns, for heredocs in fix scripts."""
    return base64.encodebytes(data).decode().rstrip("\n")


def _sh(sandbox: Sandbox, command: str, timeout: float = 60) -> str:
    result = sandbox.run(command, timeout=timeout)
    return result.output.strip() if result.exit_code == 0 else ""


def _file_context(sandbox: Sandbox, path: str, limit: int = MAX_CAPTURE) -> dict[str, Any] | None:
    """original_b64 (wrapped), mode and size of a regular file, or None if missing or too large."""
    if sandbox.run(f"test -f {shlex.quote(path)} && ! test -L {shlex.quote(path)}", timeout=60).exit_code != 0:
        return None
    data = sandbox.read(path)
    if data is None or len(data) > limit:
        return None
    mode = _sh(sandbox, f"stat -c %a {shlex.quote(path)}") or "644"
    return {"original_b64": b64_lines(data), "mode": mode.splitlines()[-1], "size": len(data)}


def capture_debpkg(sandbox: Sandbox, package: str) -> dict[str, str] | None:
    """deb_b64 + version: a .deb repacked from the installed package, so a fix can `dpkg -i` offline.

    The .deb is built in a temporary folder of the (healthy) sandbox and removed at once: nothing
    stays behind, and the fix needs no network, no apt cache and no capability.
    """
    result = sandbox.run(REPACK.format(pkg=shlex.quote(package)), timeout=300)
    for line in result.output.splitlines():
        if line.startswith("MINER-DEB "):
            data = base64.b64decode(line.split(" ", 1)[1].strip())
            version = _sh(sandbox, f"dpkg-query -W -f '${{Version}}' {shlex.quote(package)}")
            return {"deb_b64": b64_lines(data), "version": version, "size": str(len(data))}
    log.info("cannot repack %s: %s", package, result.output[-500:])
    return None


def _core(soname: str) -> bool:
    return soname.startswith(CORE_LIBRARIES)


def system_targets(sandbox: Sandbox, inventory: dict[str, Any] | None = None,
                   limit: int = MAX_CAPTURE) -> list[Target]:
    """Targets of the system family, with everything their fix scripts embed in target.attrs.

    syslib:  each shared library an extension module the project imports loads (all extension
             modules when that is unknown; never the interpreter's own nor core libraries),
             attrs soname, package, modules, original_b64, mode, size.
    debpkg:  each Debian package owning such a library, attrs version, libraries, modules, deb_b64.
    system:  role=interpreter-symlink (/usr/bin/python3, the venv's python; attrs link_target),
             role=ca-bundle, role=locale (C.utf8 LC_CTYPE), role=zoneinfo (zones the project names).
    """
    inv = inventory or system_inventory(sandbox)
    targets: list[Target] = []
    interpreter = set(inv.get("extensions", {}).get("interpreter", {}).get("libraries", []))
    loaded = set(inv.get("loaded") or [])
    owners: dict[str, list[dict[str, Any]]] = {}
    for soname, lib in sorted(inv.get("libraries", {}).items()):
        users = [u for u in lib.get("used_by", []) if u != "interpreter" and (not loaded or u in loaded)]
        if not users or soname in interpreter or _core(soname) or not lib.get("path"):
            continue
        found = _file_context(sandbox, lib["path"], limit)
        if found is None:
            continue
        attrs = {"soname": soname, "package": lib.get("package"), "modules": lib.get("modules", []), **found}
        targets.append(Target(kind="syslib", name=soname, path=lib["path"], attrs=attrs))
        if lib.get("package"):
            owners.setdefault(lib["package"], []).append(lib)
    for package, libs in sorted(owners.items()):
        if any(_core(lib["soname"]) or lib["soname"] in interpreter for lib in libs):
            continue
        deb = capture_debpkg(sandbox, package) if inv.get("dpkg") else None
        if deb is None or int(deb["size"]) > limit:
            continue
        modules = sorted({m for lib in libs for m in lib.get("modules", [])})
        attrs = {"version": deb["version"], "libraries": [lib["soname"] for lib in libs], "modules": modules,
                 "deb_b64": deb["deb_b64"]}
        targets.append(Target(kind="debpkg", name=package.split(":")[0], attrs=attrs))
    system = inv.get("system", {})
    for key in ("python_symlink", "venv_python"):
        entry = system.get(key) or {}
        if entry.get("target") and entry.get("exists"):
            targets.append(Target(kind="system", name=key.replace("_", "-"), path=entry["path"],
                                  attrs={"role": "interpreter-symlink", "link_target": entry["target"]}))
    bundle = system.get("ca_bundle") or {}
    if bundle.get("exists") and _sh(sandbox, "command -v update-ca-certificates"):
        targets.append(Target(kind="system", name="ca-bundle", path=bundle["path"], attrs={"role": "ca-bundle"}))
    locale_file = system.get("locale") or {}
    if locale_file.get("exists") and (found := _file_context(sandbox, locale_file["path"], limit)):
        targets.append(Target(kind="system", name="locale:C.utf8", path=locale_file["path"],
                              attrs={"role": "locale", "locale": "C.UTF-8", **found}))
    for zone in inv.get("zones", []):
        path = f"/usr/share/zoneinfo/{zone}"
        if found := _file_context(sandbox, path, limit):
            targets.append(Target(kind="system", name=f"zoneinfo:{zone}", path=path,
                                  attrs={"role": "zoneinfo", "zone": zone, **found}))
    return targets


def _typo(value: str) -> str:
    """A plausible wrong value: two middle characters swapped (or a suffix when that changes nothing)."""
    if len(value) >= 4:
        mid = len(value) // 2
        swapped = value[: mid - 1] + value[mid] + value[mid - 1] + value[mid + 1:]
        if swapped != value:
            return swapped
    return value + "x"


def _edited(text: str, line_no: int, new_value: str) -> str:
    lines = text.splitlines(keepends=True)
    match = ASSIGNMENT.match(lines[line_no - 1].rstrip("\n"))
    assert match is not None
    ending = lines[line_no - 1][len(lines[line_no - 1].rstrip("\n")):]
    lines[line_no - 1] = match.group("head") + new_value + match.group("tail") + ending
    return "".join(lines)


def _service_answers(sandbox: DockerSandbox, verbose: bool) -> tuple[list[bytes], str]:
    """Bodies of the service's HTTP answers and its log (imports listed when verbose)."""
    bodies: list[bytes] = []
    try:
        if not sandbox.start_service(env={"PYTHONVERBOSE": "1"} if verbose else None):
            return bodies, ""
        for port in sandbox.ports():
            answer = sandbox.http_get(port)
            if answer:
                bodies.append(answer[1])
        return bodies, sandbox.service_log()
    finally:
        sandbox.stop_service()


def service_targets(sandbox: Sandbox, limit: int = 256 * 1024) -> list[Target]:
    """Targets of the service family for a Dockerized service (an image that EXPOSEs ports).

    role=port:   a config line whose value is an EXPOSEd port (attrs key, value, new_value, line,
                 original_b64, broken_b64, mode; path project-relative);
    role=value:  a config value that shows in the service's HTTP answer (same attrs);
    role=dependency: a Python module the running service imports from outside the project and
                 the standard library (attrs module, original_b64, mode; path absolute).
    """
    if not isinstance(sandbox, DockerSandbox) or not sandbox.healthy.info.get("dockerized") or not sandbox.ports():
        return []
    bodies, log_text = _service_answers(sandbox, verbose=True)
    ports = {str(p) for p in sandbox.ports()}
    targets: list[Target] = []
    listing = _sh(sandbox, "find . -path ./tests -prune -o -path ./test -prune -o -type f -size -256k -print")
    for rel in sorted(line[2:] for line in listing.splitlines() if line.endswith(CONFIG_SUFFIXES)):
        data = sandbox.read(f"{PROJECT_DIR}/{rel}") or b""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        mode = _sh(sandbox, f"stat -c %a {shlex.quote(rel)}") or "644"
        for number, line in enumerate(text.splitlines(), start=1):
            match = ASSIGNMENT.match(line)
            if not match or not match.group("value").strip():
                continue
            value = match.group("value").strip()
            if value in ports:
                role, new = "port", str(int(value) + 1)
            elif len(value) >= 3 and not value.isdigit() and any(value.encode() in body for body in bodies):
                role, new = "value", _typo(value)
            else:
                continue
            attrs = {"role": role, "key": match.group("key"), "value": value, "new_value": new, "line": number,
                     "original_b64": b64_lines(data), "mode": mode.splitlines()[-1],
                     "broken_b64": b64_lines(_edited(text, number, new).encode())}
            targets.append(Target(kind="service", name=f"{role}:{rel}:{match.group('key')}", path=rel, attrs=attrs))
    stdlib = _sh(sandbox, "python3 -c 'import sysconfig; print(sysconfig.get_path(\"stdlib\"))'")
    seen: set[str] = set()
    for path in re.findall(r"# code object from '?([^'\s]+\.py)'?$|matches (\S+\.py)$", log_text, flags=re.M):
        path = path[0] or path[1]
        inside = path.startswith((SANDBOX_ROOT + "/", sandbox.image_workdir().rstrip("/") + "/"))
        in_stdlib = stdlib and path.startswith(stdlib + "/") and "-packages/" not in path
        if path in seen or inside or in_stdlib or "-packages/" not in path:
            continue
        seen.add(path)
        found = _file_context(sandbox, path, limit)
        if found:
            module = os.path.basename(path).removesuffix(".py")
            targets.append(Target(kind="service", name=f"dependency:{module}", path=path,
                                  attrs={"role": "dependency", "module": module, **found}))
    return targets


__all__ = [
    "DockerBackend",
    "DockerSandbox",
    "BackendUnavailable",
    "capture_debpkg",
    "docker_probes",
    "prune_stale",
    "run_docker_probes",
    "service_targets",
    "system_inventory",
    "system_targets",
]
