"""The Docker sandbox backend, one module per concern:

    layout.py     THE image layout (folders, environment, build script, broken layer, image facts),
                  shared with the exporters so a task rebuilds exactly what was validated
    images.py     the engine client, labels, base images (and their bootstrap), pip settings
                  forwarded into builds, builds, broken snapshots, listing and pruning
    backend.py    DockerBackend: build / fork / discard, observe, derived probes
    container.py  DockerSandbox: one confined container (commands, files, the image's service)
    probes.py     derived probes of Dockerized projects (CMD, HEALTHCHECK, HTTP ports)
    observe.py    what the backend sees beneath the project (system inventory, a service's config,
                  answers and imports), for miner.inverters.system

    backend = DockerBackend()               # or miner.sandbox.get_backend("docker")
"""

from miner.sandbox.docker.backend import CAPABILITIES, DockerBackend
from miner.sandbox.docker.container import SESSION, DockerSandbox, prune_stale
from miner.sandbox.docker.observe import file_owners, observe, system_inventory
from miner.sandbox.docker.probes import docker_probes, run_docker_probes

__all__ = [
    "CAPABILITIES",
    "SESSION",
    "DockerBackend",
    "DockerSandbox",
    "docker_probes",
    "file_owners",
    "observe",
    "prune_stale",
    "run_docker_probes",
    "system_inventory",
]
