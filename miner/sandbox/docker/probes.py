"""Derived probes of Dockerized projects: checks recorded from what the project's image does.

One-shot images: `probe::cmd` (exit code and output digest of ENTRYPOINT/CMD). Services (images
that EXPOSE ports): `probe::http::<port>/` (HTTP status and body digest of each port that answers)
and `probe::healthcheck` (exit code of the image's HEALTHCHECK). All measured inside the container
(see container.DockerSandbox), twice on a healthy fork (`docker_probes`: unstable ones are left
out), and checked on any later fork by `run_docker_probes`.
"""

from __future__ import annotations

import hashlib
import logging
import time

from miner.models import Probe, TestResult
from miner.sandbox.base import Sandbox
from miner.sandbox.docker.container import DockerSandbox

log = logging.getLogger(__name__)

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
    mine = [p for p in probes if p.id in ("probe::cmd", "probe::healthcheck") or p.id.startswith("probe::http::")]
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
