"""A running fork of a healthy (or broken) image: one confined container and its commands.

The container runs `sleep infinity` under an init process, all capabilities dropped,
no-new-privileges, memory / CPU / pids limits, and no network: it is created on the default
bridge and disconnected before it starts; a command run with network=True reconnects it for
that command only (and disconnects afterwards).

run():    `docker exec` of bash -c 'cd $MINER_PROJECT; CMD' (bash reads the environment from
          ~/.bashrc through the image's BASH_ENV, as a harness's exec does) under coreutils
          `timeout` (kills the whole process group), with a host-side guard that kills the
          container when even that does not end the command.

A Dockerized project's image also has its own command, ports and health check: the sandbox
starts and stops that service, asks its ports over HTTP and runs its HEALTHCHECK, all inside
the container. Every container is labelled (see images.labels); those of this process are
removed on close(), at exit and on SIGTERM, and leftovers of dead processes are pruned
(`prune_stale`) when a backend starts.
"""

from __future__ import annotations

import atexit
import base64
import logging
import math
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from miner.models import PROJECT_DIR, RunResult
from miner.sandbox.base import Healthy, Limits, Sandbox, SandboxError, miner_env
from miner.sandbox.docker import gateway, images
from miner.sandbox.docker.layout import image_facts

log = logging.getLogger(__name__)

MAX_OUTPUT = 2_000_000  # characters of command output kept (the tail), as the local backend
GUARD_SECONDS = 20  # extra wall time before the host kills a container whose command will not end
SERVICE_PIDFILE = "/tmp/.service.pid"
SERVICE_LOG = "/tmp/.service.log"
PROBE_TIMEOUT = 120.0
INLINE_LIMIT = 64 * 1024  # longer commands go through a file (an argv string holds 128 kB)

SESSION = uuid.uuid4().hex[:12]
_HAS_TIMEOUT: dict[str, bool] = {}  # image -> whether it has coreutils timeout and bash (asked once)
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
                install_sigterm()
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


def install_sigterm() -> None:
    """Turn SIGTERM into SystemExit (so finally blocks and atexit run) unless someone handles it;
    the containers this process created go first (a worker thread busy in one would otherwise
    hold the exit until its run ends). Call it from the main thread: a signal handler can only
    be set there."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def _exit(signum: int, _frame: Any) -> None:
        REGISTRY.cleanup()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def fork_labels(**extra: str) -> dict[str, str]:
    return images.labels("fork", session=SESSION, pid=str(os.getpid()), host=_HOST, **extra)


def prune_stale(client: docker.DockerClient) -> images.PruneReport:
    """Remove fork containers left by miner processes of this host that are no longer alive."""
    report = images.PruneReport()
    images.remove_containers(client, {"label": [f"{images.LABEL}=1", f"{images.KIND}=fork"]}, report, only_stale=True)
    return report


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
        self.env = {**miner_env(), "MINER_SITE_PACKAGES": healthy.site_packages}
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
            if image not in _HAS_TIMEOUT:  # a fresh container of an image answers as every other one
                probe = self._exec(["sh", "-c", "command -v timeout >/dev/null && command -v bash >/dev/null"],
                                   timeout=60)
                _HAS_TIMEOUT[image] = probe[0] == 0
            self.has_timeout = _HAS_TIMEOUT[image]
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

    def settle(self) -> None:
        """A break or fix script may leave a process behind (a service it started): the container
        restarts, its files kept, so no such process is alive while the tests run."""
        if not self.closed:
            self._restart()

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
        script = f'cd "$MINER_PROJECT"; {command_text}'  # bash has read $BASH_ENV (~/.bashrc) already
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
        return gateway.read_file(self.container, path, follow=True)

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        parent, name = os.path.split(os.path.normpath(path))
        code, out, _ = self._exec(["mkdir", "-p", parent or "/"], timeout=60)
        if code != 0:
            raise OSError(f"cannot create {parent}: {out.strip()}")
        if not self.container.put_archive(parent or "/", gateway.tar_files({name: data}, mode)):
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
                        "bash", "--login", "-i"], check=False)

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

    def run_image_command(self, timeout: float = PROBE_TIMEOUT, wrap: list[str] | None = None) -> tuple[int, str]:
        """Run the image's CMD once, as the image would (its user and workdir), from `bash -c` (which
        reads the environment through BASH_ENV); `wrap` goes before it (a tracer)."""
        argv = [*(wrap or []), *self.image_command()]
        script = f"cd {shlex.quote(self.image_workdir())}; exec {shlex.join(argv)}"
        code, out, _ = self._exec(self._timed(["bash", "-c", script], timeout), timeout=timeout,
                                  user=self.image_user())
        return code, out

    def start_service(self, env: dict[str, str] | None = None, wrap: list[str] | None = None) -> bool:
        """Start the image's CMD in the background (own session); wait until its ports answer.
        `wrap` goes before the command (a tracer)."""
        if not self.image_command():
            return False
        argv = [*(wrap or []), *self.image_command()]
        script = (f"echo $$ > {SERVICE_PIDFILE}; cd {shlex.quote(self.image_workdir())}; "
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

    def healthcheck(self, timeout: float = 30.0, wrap: list[str] | None = None) -> tuple[int, str] | None:
        """Run the image's HEALTHCHECK test once, as Docker would: (exit code, output), or None.
        `wrap` goes before it (a tracer)."""
        test = self.image["healthcheck"]
        if not test:
            return None
        argv = ["/bin/sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:] if test[0] == "CMD" else test
        argv = [*(wrap or []), *argv]
        code, out, _ = self._exec(self._timed(argv, timeout), timeout=timeout, user=self.image_user(),
                                  workdir=self.image_workdir())
        return code, out

