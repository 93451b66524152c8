"""Exporting tasks mined from a project's own Dockerfile ("Dockerized projects").

The exported Dockerfile rebuilds what the Docker backend validated, from the task's files only:

    FROM scratch AS miner-context      the project's files (project.tar.gz, its .dockerignore applied)
    <the project's Dockerfile>         its COPY/ADD sources read from miner-context, its
                                       BASE_IMAGE argument defaulting to the export's base image,
                                       its last stage named (miner-project unless it has a name)
    FROM miner-project AS healthy      the layout stage the backend adds (miner.sandbox.docker.layout):
                                       the WORKDIR moved to /sandbox/project, a venv seeing the
                                       image's packages with the test tooling installed
    FROM healthy + break layer         as for every task

The image's CMD, ENTRYPOINT, WORKDIR, USER, EXPOSEd ports and HEALTHCHECK (measured on the built
project stage) go into manifest.json, so the verifier runs the derived probes as the backend did.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from pathlib import Path

from docker.utils.build import exclude_paths

from miner.export.archive import project_tarball
from miner.sandbox.docker.layout import image_facts

PROJECT_STAGE = "miner-project"
CONTEXT_STAGE = "miner-context"
CONTEXT_ROOT = "/project"
_FROM = re.compile(r"^(?P<head>FROM\s+(?:--\S+\s+)*\S+)(?:\s+AS\s+(?P<name>\S+))?\s*$", re.IGNORECASE)
_ARG = re.compile(r"^ARG\s+BASE_IMAGE(?:=.*)?$", re.IGNORECASE)
_REMOTE = ("http://", "https://", "git@", "git://")


class DockerfileError(ValueError):
    """A project Dockerfile the exporter cannot rewrite."""


def logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined; comments and blanks dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # comments inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        out.append((pending + line).strip())
        pending = ""
    if pending.strip():
        out.append(pending.strip())
    return out


def _source(src: str) -> str:
    """A COPY/ADD source path of the build context, as a path of the miner-context stage."""
    joined = posixpath.normpath(posixpath.join(CONTEXT_ROOT, src.lstrip("/")))
    if not (joined == CONTEXT_ROOT or joined.startswith(CONTEXT_ROOT + "/")):
        raise DockerfileError(f"COPY source {src!r} leaves the build context")
    return joined + ("/" if src.endswith("/") and joined != "/" else "")


def _rewrite_copy(line: str) -> str:
    """COPY/ADD from the build context becomes COPY --from=miner-context (other forms unchanged)."""
    keyword, _, rest = line.partition(" ")
    rest = rest.strip()
    if rest.startswith("["):
        try:
            args = json.loads(rest)
        except ValueError as exc:
            raise DockerfileError(f"unreadable {keyword} instruction: {line}") from exc
        flags: list[str] = []
    else:
        words = shlex.split(rest, posix=True)
        flags = [w for w in words if w.startswith("--")]
        args = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags) or any(a.startswith("<<") for a in args):
        return line
    if len(args) < 2:
        raise DockerfileError(f"{keyword} needs a source and a destination: {line}")
    *sources, dest = args
    if keyword.upper() == "ADD" and any(s.startswith(_REMOTE) for s in sources):
        return line
    # ADD extracts local archives; COPY --from would not: keep that behaviour visible.
    archives = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
    if keyword.upper() == "ADD" and any(s.endswith(archives) for s in sources):
        raise DockerfileError(f"ADD of a local archive cannot be rewritten: {line}")
    kept = [f for f in flags if not f.startswith(("--link", "--checksum", "--keep-git-dir"))]
    return "COPY " + " ".join([f"--from={CONTEXT_STAGE}", *kept]) + " " + json.dumps([*map(_source, sources), dest])


def rewrite(text: str, base_image: str, prefix: str = "", checkout: bool = False) -> tuple[str, str]:
    """The project's Dockerfile, rewritten to build from the exported task's files.

    Returns (Dockerfile text, name of its last stage). The text starts with the miner-context
    stage (after the project's global ARGs, which must precede every FROM). With `checkout` the
    build context is the project's checkout itself: COPY/ADD stay as written, no miner-context."""
    lines = logical_lines(text)
    froms = [i for i, line in enumerate(lines) if line.upper().startswith("FROM ")]
    if not froms:
        raise DockerfileError("the Dockerfile has no FROM")
    out_preamble: list[str] = []
    out_body: list[str] = []
    last = PROJECT_STAGE
    for i, line in enumerate(lines):
        word = line.split(None, 1)[0].upper()
        target = out_preamble if i < froms[0] else out_body
        if _ARG.match(line):
            target.append(f"ARG BASE_IMAGE={base_image}")
        elif word == "FROM" and i == froms[-1]:
            match = _FROM.match(line)
            if match is None:
                raise DockerfileError(f"unreadable FROM: {line}")
            last = match.group("name") or PROJECT_STAGE
            target.append(f"{match.group('head')} AS {last}")
        elif word in ("COPY", "ADD") and not checkout:
            target.append(_rewrite_copy(line))
        else:
            target.append(line)
    context = [] if checkout else [f"FROM scratch AS {CONTEXT_STAGE}", f"ADD {prefix}project.tar.gz /"]
    return "\n".join([*out_preamble, *context, *out_body]) + "\n", last


def context_tarball(root: Path, tarball: bytes) -> bytes:
    """project.tar.gz without what the project's .dockerignore excludes (as `docker build` would)."""
    ignore = Path(root) / ".dockerignore"
    if not ignore.is_file():
        return tarball
    patterns = [p.strip() for p in ignore.read_text(errors="replace").splitlines()
                if p.strip() and not p.strip().startswith("#")]
    keep = {p.replace("\\", "/") for p in exclude_paths(str(root), patterns)}
    return project_tarball(root, include=lambda rel: rel in keep)


def image_config(attrs: dict) -> dict:
    """What the verifier needs of the project image's config to run its derived probes (as the
    Docker backend reads it: miner.sandbox.docker.layout.image_facts)."""
    return image_facts(attrs.get("Config") or {})
