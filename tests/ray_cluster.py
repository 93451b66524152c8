"""A real Ray cluster on this machine for the `ray` tests and bench/overhead.py: a head node and a
second node joined to it, each a `ray start --block` process group of its own, so that either can
be killed (a node dying mid-crawl) and both are stopped by their process ids, never `ray stop`
(which would end every Ray instance of the machine, other people's too).

    with local_cluster(cpus=(1, 1)) as cluster:
        cluster.address        # "127.0.0.1:PORT": miner crawl --executor ray --address ...
        cluster.node_id        # the second node's id (8 hex digits, as miner's progress lines show it)
        cluster.kill_node()    # SIGKILL to the second node's processes

Needs Ray (`pip install -e '.[ray]'`): `ray_missing()` says why not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

STARTUP_SECONDS = 180
NODE_RESOURCE = "miner_test_node2"  # how the second node is told apart


def ray_missing() -> str | None:
    """Why a Ray cluster cannot be started here, or None."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install -e '.[ray]')"
    if _ray_command() is None:
        return "the `ray` command is not installed next to this interpreter"
    return None


def _ray_command() -> str | None:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.is_file() else shutil.which("ray")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(args: list[str], log: Path) -> subprocess.Popen:
    command = _ray_command()
    assert command, ray_missing()
    with open(log, "ab") as out:
        return subprocess.Popen([command, "start", *args, "--block", "--disable-usage-stats"], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})


def _stop(proc: subprocess.Popen) -> None:
    """End a node: its whole process group (raylet, workers, agents), politely then not."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


NODES_SCRIPT = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps([{"id": n["NodeID"], "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]))
"""


def alive_nodes(address: str) -> list[dict]:
    """The cluster's live nodes (id and resources), asked from a separate driver process."""
    done = subprocess.run([sys.executable, "-c", NODES_SCRIPT, address], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return []
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class Cluster:
    address: str
    head: subprocess.Popen
    node: subprocess.Popen
    node_id: str
    temp: Path

    def kill_node(self) -> None:
        """SIGKILL to every process of the second node, as if its machine went away."""
        try:
            os.killpg(self.node.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.node.wait(timeout=30)


@contextmanager
def local_cluster(cpus: tuple[int, int] = (1, 1), resources: dict[str, float] | None = None) -> Iterator[Cluster]:
    """A head and a second node on this machine, each with its CPUs (and the same extra resources,
    e.g. {"docker": 1}); everything stopped and removed afterwards."""
    temp = Path(tempfile.mkdtemp(prefix="mray", dir="/tmp"))  # short: Ray's socket paths must stay short
    port = _free_port()
    address = f"127.0.0.1:{port}"
    extra = dict(resources or {})
    common = ["--node-ip-address", "127.0.0.1"]
    head = _start(["--head", "--include-dashboard=false", "--port", str(port), "--num-cpus", str(cpus[0]),
                   "--temp-dir", str(temp),
                   "--ray-client-server-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
                   "--object-store-memory", str(200_000_000), "--resources", json.dumps(extra), *common],
                  temp / "head.log")
    node = None
    try:
        node = _start(["--address", address, "--num-cpus", str(cpus[1]), "--object-store-memory", str(100_000_000),
                       "--dashboard-agent-listen-port", str(_free_port()),
                       "--resources", json.dumps({**extra, NODE_RESOURCE: 1}), *common], temp / "node.log")
        node_id = _wait_for_nodes(address, temp)
        yield Cluster(address, head, node, node_id, temp)
    finally:
        if node is not None:
            _stop(node)
        _stop(head)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_nodes(address: str, temp: Path) -> str:
    """The second node's short id, once both nodes are alive."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        nodes = alive_nodes(address)
        second = [n["id"] for n in nodes if NODE_RESOURCE in n["resources"]]
        if len(nodes) >= 2 and second:
            return second[0][:8]
        time.sleep(2)
    logs = "".join(p.read_text(errors="replace")[-1500:] for p in temp.glob("*.log"))
    raise RuntimeError(f"the Ray cluster did not come up in {STARTUP_SECONDS}s:\n{logs}")
