"""Run derived probes and print their raw results as JSON (run inside a sandbox or container).

Standalone on purpose (copied into sandboxes and exported tasks; imports nothing of miner).
Input: a JSON file with a list of probes {"id", "kind", "argv", "module"} and, for the probes of
a Dockerized project's image (ids probe::cmd, probe::healthcheck, probe::http::PORT/), a second
JSON file with the image's config {"command", "workdir", "ports", "healthcheck"}. They are run as
miner.sandbox.docker runs them in the backend: the service started from the image's command,
its ports awaited, the HEALTHCHECK retried, each port asked `GET /` once, the service stopped.
Output on stdout: {id: {"exit": int, "digest": sha256 of the output or HTTP body, "head": ...}}.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

TIMEOUT = 60
IMAGE_TIMEOUT = 120
SERVICE_WAIT = 20.0
HEALTHCHECK_ATTEMPTS = 5
NO_ANSWER = {"exit": -1, "digest": "", "head": "no answer"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_probe(probe: dict) -> dict:
    if probe["kind"] == "import":
        argv = [os.environ.get("MINER_PYTHON", sys.executable), "-c", "import " + probe["module"]]
    else:
        argv = probe["argv"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        # the digest covers stdout only: stderr carries warnings that vary between runs
        exit_code, stdout, output = proc.returncode, proc.stdout, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        exit_code, stdout, output = -9, b"timeout", b"timeout"
    except OSError as exc:  # missing or non-executable program
        exit_code = 126 if isinstance(exc, PermissionError) else 127
        stdout = output = str(exc).encode()
    return {
        "exit": exit_code,
        "digest": sha256(stdout),
        "head": output.decode("utf-8", "replace")[:2000],
    }


# -- the probes of a Dockerized project's image --------------------------------------------------


def run_merged(argv: list, cwd: str, timeout: float) -> dict:
    """Exit code and digest of stdout and stderr as one stream (as `docker exec` returns them)."""
    try:
        proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=timeout, start_new_session=True)
        code, out = proc.returncode, proc.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        code, out = 124, "timeout"
    except OSError as exc:
        code, out = (126 if isinstance(exc, PermissionError) else 127), str(exc)
    return {"exit": code, "digest": sha256(out.encode()), "head": out[:2000]}


def healthcheck_argv(test: list) -> list:
    if not test:
        return []
    if test[0] == "CMD-SHELL":
        return ["/bin/sh", "-c", test[1]]
    return test[1:] if test[0] == "CMD" else test


def healthcheck(image: dict, retries: int) -> dict:
    result = NO_ANSWER
    for attempt in range(retries):
        result = run_merged(healthcheck_argv(image["healthcheck"]), image["workdir"], 30)
        if result["exit"] == 0:
            break
        if attempt + 1 < retries:
            time.sleep(1)
    return {**result, "digest": ""}


def http_get(port: int, timeout: float = 10.0) -> dict:
    request = b"GET / HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    chunks = []
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(request)
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return NO_ANSWER
    head, sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or not status[0].startswith(b"HTTP/") or not status[1].isdigit():
        return NO_ANSWER
    return {"exit": int(status[1]), "digest": sha256(body), "head": body.decode("utf-8", "replace")[:2000]}


def ports_open(ports: list) -> bool:
    for port in ports:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
    return True


def start_service(image: dict, log) -> "subprocess.Popen | None":
    """The image's command in its own session; None when it died or its ports never opened."""
    try:
        proc = subprocess.Popen(image["command"], cwd=image["workdir"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        log.write(f"cannot start {image['command']}: {exc}\n".encode())
        return None
    deadline = time.monotonic() + SERVICE_WAIT
    while time.monotonic() < deadline:
        if ports_open(image["ports"]):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    stop_service(proc)
    return None


def stop_service(proc: "subprocess.Popen") -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            continue


def run_image_probes(probes: list, image: dict) -> dict:
    results = {}
    service = [p for p in probes if p["id"].startswith("probe::http::") or p["id"] == "probe::healthcheck"]
    if image["ports"] and service:
        with tempfile.TemporaryFile() as log:
            proc = start_service(image, log)
            try:
                for probe in sorted(service, key=lambda p: p["id"]):
                    if probe["id"] == "probe::healthcheck":
                        results[probe["id"]] = healthcheck(image, HEALTHCHECK_ATTEMPTS if proc else 1)
                    else:
                        port = int(probe["id"].split("::")[2].rstrip("/"))
                        results[probe["id"]] = http_get(port) if proc else NO_ANSWER
            finally:
                if proc is not None:
                    stop_service(proc)
    for probe in probes:
        if probe["id"] == "probe::cmd":
            results[probe["id"]] = run_merged(probe["argv"] or image["command"], image["workdir"], IMAGE_TIMEOUT)
        elif probe["id"] == "probe::healthcheck" and probe["id"] not in results:
            results[probe["id"]] = healthcheck(image, 1)
    return results


def is_image_probe(probe: dict) -> bool:
    return probe["id"] in ("probe::cmd", "probe::healthcheck") or probe["id"].startswith("probe::http::")


def main() -> None:
    with open(sys.argv[1]) as handle:
        probes = json.load(handle)
    image = None
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as handle:
            image = json.load(handle)
    own = [p for p in probes if image is not None and is_image_probe(p)]
    results = {p["id"]: run_probe(p) for p in probes if p not in own}
    if own:
        results.update(run_image_probes(own, image))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
