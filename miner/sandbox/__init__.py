"""Sandbox backends behind one interface (see base.py); `get_backend` picks one by name.

    backend = get_backend("local")          # bubblewrap workspaces
    backend = get_backend("docker")         # containers (the miner.sandbox.docker package)
    backend = get_backend("auto")           # docker when an engine answers, else local
"""

from __future__ import annotations

from typing import Any

from miner.sandbox.base import (
    Backend,
    BackendUnavailable,
    BuildError,
    BuildSpec,
    Capabilities,
    Healthy,
    Limits,
    Sandbox,
    SandboxError,
)

BACKENDS = ("local", "docker", "auto")

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailable",
    "BuildError",
    "BuildSpec",
    "Capabilities",
    "Healthy",
    "Limits",
    "Sandbox",
    "SandboxError",
    "docker_available",
    "get_backend",
]


def docker_available(timeout: float = 5.0) -> bool:
    """True when a Docker engine answers a ping."""
    try:
        import docker  # imported lazily: the local backend must not need the SDK

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # any failure to reach an engine means "not available"
        return False


def get_backend(name: str, **kw: Any) -> Backend:
    """The backend called `name` ("local", "docker" or "auto"), built with keyword options kw."""
    if name == "auto":
        name = "docker" if docker_available() else "local"
    if name == "local":
        from miner.sandbox.local import LocalBackend

        return LocalBackend(**kw)
    if name == "docker":
        from miner.sandbox.docker import DockerBackend

        return DockerBackend(**kw)
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
