"""THE image layout: how a healthy image holds a project, written once for the Docker backend and
the exporters (miner.export builds its tasks' Dockerfiles from these same functions).

A healthy image is one stage on top of a parent (a base image, or a Dockerized project's own
image), laid out like every sandbox (see miner.sandbox.base):

    FROM <parent>
    USER root
    COPY host-ca.crt /etc/ssl/certs/host-ca.crt        when pip needs the host's CA bundle
    ENV MINER_PROJECT=/sandbox/project ... PATH=/sandbox/venv/bin:... BASH_ENV=... PIP_...   (image_env + pip)
    COPY <the project's files> /sandbox/project/       (a Dockerized project: /tmp/miner-project/)
    COPY build/ /sandbox/.build/                       build.sh, install.sh, bashrc, profile, shell-hook.sh,
                                                       constraints.txt
    RUN bash /sandbox/.build/build.sh && rm -rf /sandbox/.build

build.sh (`build_script`) installs the shell's startup files (miner.sandbox.layout: ~/.bashrc holds
the environment, ~/.profile, the hooks in /etc/profile.d/ and /etc/bash.bashrc for every user),
creates the venv and runs the build's install script (miner.ecosystems.build_spec) in the project
folder. A Dockerized project's WORKDIR (where its files are) becomes /sandbox/project, with a
symlink left at the old place, so the project is exactly what its image holds. A broken snapshot is the healthy image plus one
layer running the break script (`break_dockerfile`). `image_facts` reads what running a
Dockerized project's image needs.
"""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

from miner.models import ENV_FILE, HOME_DIR, PROJECT_DIR, SANDBOX_ROOT, VENV_DIR
from miner.sandbox import layout as shell_layout
from miner.sandbox.base import BuildSpec, miner_env

BUILD_DIR = f"{SANDBOX_ROOT}/.build"  # the build files, removed in the layer that used them
STAGING_DIR = "/tmp/miner-project"  # a Dockerized project's files wait here when its image has no WORKDIR
HOST_CA_NAME = "host-ca.crt"  # the host's CA bundle in a build context, for pip behind a TLS proxy
HOST_CA_PATH = "/etc/ssl/certs/host-ca.crt"


def image_env(site_packages: str = "", dockerized: bool = False) -> dict[str, str]:
    """The ENV of a healthy image: the MINER_* variables, the venv first on PATH, HOME and BASH_ENV
    (every bash reads ~/.bashrc), and LANG=C.UTF-8 (a Dockerized project's image keeps its own locale)."""
    env = miner_env(site_packages) | shell_layout.shell_env() | {"VIRTUAL_ENV": VENV_DIR,
                                                                 "PATH": shell_layout.SANDBOX_PATH}
    if not dockerized:
        env["LANG"] = "C.UTF-8"
    return env


def env_instruction(env: dict[str, str]) -> str:
    """One Dockerfile ENV instruction setting every variable (values JSON-quoted), sorted."""
    return "ENV " + " \\\n    ".join(f"{name}={json.dumps(value)}" for name, value in sorted(env.items()))


BUILD_SH = """#!/bin/bash
# miner: lay out the healthy environment (miner.sandbox.docker.layout): project, the shell's
# startup files (the environment), venv, then the install script in the project folder. Runs
# once, in the image's build.
set -e
mkdir -p {root} {home}
{place_project}rm -rf {project}/.git  # a checkout's history holds answers: never in the image
install -m 0644 {build}/bashrc {env_file}
install -m 0644 {build}/profile {home}/{profile}
{hooks}export PIP_NO_CACHE_DIR=1
if [ -s {build}/constraints.txt ]; then export PIP_CONSTRAINT={build}/constraints.txt; fi
if command -v {python} >/dev/null 2>&1; then
    {python} -m venv {venv_options}{venv}
    bash -c 'set -e; source {venv}/bin/activate; cd {project}; source {build}/install.sh'
else
    {no_python}
fi
rm -f /var/cache/apt/archives/*.deb
{venv}/bin/python -m compileall -q -j 0 {project} {venv}/lib >/dev/null 2>&1 || true
"""

# The RUN's folder is the image's WORKDIR: it becomes /sandbox/project (a symlink stays behind);
# an image without a WORKDIR gets the project's files from the staging folder.
PLACE_DOCKERIZED = """wd="$(pwd)"
if [ -n "$wd" ] && [ "$wd" != / ] && [ -d "$wd" ] && [ ! -e {project} ]; then
    mv "$wd" {project} && ln -s {project} "$wd"
fi
if [ ! -e {project} ]; then mkdir -p {project}; cp -r {staging}/. {project}/; fi
rm -rf {staging}
"""


def build_script(python: str, dockerized: bool) -> str:
    """build.sh: the healthy layout built from the files in /sandbox/.build.

    A generated image's venv is plain; a Dockerized project's venv sees the image's own packages
    (--system-site-packages) and is left empty when the image has no such interpreter.
    """
    place = PLACE_DOCKERIZED.format(project=PROJECT_DIR, staging=STAGING_DIR) if dockerized else ""
    return BUILD_SH.format(root=SANDBOX_ROOT, home=HOME_DIR, place_project=place, build=BUILD_DIR, env_file=ENV_FILE,
                           profile=shell_layout.PROFILE_NAME,
                           hooks=shell_layout.system_hooks_script(f"{BUILD_DIR}/shell-hook.sh"),
                           python=shlex.quote(python), venv=VENV_DIR, project=PROJECT_DIR,
                           venv_options="--system-site-packages " if dockerized else "",
                           no_python=f"mkdir -p {VENV_DIR}/bin" if dockerized else
                           f"echo 'miner: {python} is not in the base image' >&2; exit 1")


def build_files(spec: BuildSpec, dockerized: bool, constraints: str = "") -> dict[str, str]:
    """The files of the build folder: build.sh, install.sh, the shell's startup files (bashrc: the
    environment, profile, shell-hook.sh) and constraints.txt (pins, empty when nothing is pinned)."""
    home = shell_layout.home_files(spec.env)
    return {
        "build.sh": build_script(spec.python, dockerized),
        "install.sh": spec.install_script or "true\n",
        "bashrc": home[shell_layout.RC_NAME],
        "profile": home[shell_layout.PROFILE_NAME],
        "shell-hook.sh": shell_layout.HOOK,
        "constraints.txt": constraints,
    }


def inline_files(files: dict[str, str], folder: str) -> str:
    """A RUN instruction writing text files into a folder (base64: any content survives), for a
    Dockerfile whose build context holds none of them."""
    parts = [f"mkdir -p {folder}"]
    for name, text in sorted(files.items()):
        parts.append(f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {folder}/{name}")
    return "RUN " + " \\\n    && ".join(parts)


def healthy_stage(parent: str, *, env: dict[str, str], project_source: str, dockerized: bool, name: str = "",
                  ca_source: str = "", build_source: str = "build/", build_inline: dict[str, str] | None = None) -> str:
    """The Dockerfile text of the healthy stage on `parent`.

    env            image_env(...) plus the pip settings forwarded from the host
    project_source the COPY/ADD source of the project's files (a folder, an archive, a stage path)
    ca_source      the context path of the host's CA bundle, when pip needs it
    build_source   the context folder of the build files, or build_inline: the files themselves
    """
    head = f"FROM {parent}" + (f" AS {name}" if name else "")
    lines = [head, "USER root"]
    if ca_source:
        lines.append(f"COPY {ca_source} {HOST_CA_PATH}")
    lines.append(env_instruction(env))
    if dockerized:
        lines.append(f"COPY {project_source} {STAGING_DIR}/")
    elif project_source.endswith(".tar.gz"):
        lines.append(f"ADD {project_source} {SANDBOX_ROOT}/")  # the archive's top folder is project/
    else:
        lines.append(f"COPY {project_source} {PROJECT_DIR}/")
    lines.append(inline_files(build_inline, BUILD_DIR) if build_inline is not None
                 else f"COPY {build_source} {BUILD_DIR}/")
    lines.append(f"RUN bash {BUILD_DIR}/build.sh && rm -rf {BUILD_DIR}")
    if not dockerized:  # a Dockerized project keeps its WORKDIR (now a symlink to /sandbox/project)
        lines.append(f"WORKDIR {PROJECT_DIR}")
    return "\n".join(lines) + "\n"


def site_packages_layer(parent: str, site_packages: str) -> str:
    """The layer that records the venv's site-packages once a build measured it."""
    return f"FROM {parent}\nENV MINER_SITE_PACKAGES={json.dumps(site_packages)}\n"


SITE_PACKAGES_PROBE = (f"if [ -x {VENV_DIR}/bin/python ]; then {VENV_DIR}/bin/python -c "
                       "\"import sysconfig; print(sysconfig.get_path('purelib'))\"; fi")


def break_dockerfile(healthy_image: str, break_script_name: str = "break.sh", context_dir: str = "",
                     script: str | None = None) -> str:
    """The Dockerfile of a broken snapshot: the healthy image plus the break script as one layer.

    The script runs like every sandbox command (`bash -c`, which reads ~/.bashrc through BASH_ENV,
    in $MINER_PROJECT, as root) and is deleted in the same layer, so the snapshot's filesystem
    holds no copy of it. The script comes from the build context (`context_dir` + its name) or,
    given as `script`, is written by the Dockerfile itself. Exporters use this text as it is.
    """
    name = break_script_name
    run = f"bash -c 'cd {PROJECT_DIR} && bash /tmp/{name}' && rm -f /tmp/{name}"
    if script is not None:  # written and removed in the same layer: no lower layer keeps it
        return f"FROM {healthy_image}\nUSER root\n{inline_files({name: script}, '/tmp')} \\\n    && {run}\n"
    return f"FROM {healthy_image}\nUSER root\nCOPY {context_dir}{name} /tmp/{name}\nRUN {run}\n"


IMAGE_CONFIG_KEYS = ("Cmd", "Entrypoint", "WorkingDir", "User", "ExposedPorts", "Healthcheck", "Env")


def image_config(attrs: dict[str, Any]) -> dict[str, Any]:
    """The keys of an image's Docker "Config" that miner keeps (from `image.attrs`)."""
    config = attrs.get("Config") or {}
    return {key: config.get(key) for key in IMAGE_CONFIG_KEYS}


def image_facts(config: dict[str, Any]) -> dict[str, Any]:
    """What running a Dockerized project's image needs of its config (Docker's "Config" keys):
    command (ENTRYPOINT + CMD), workdir, user, EXPOSEd TCP ports, HEALTHCHECK test ([] if none),
    the variables its ENV sets."""
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
        "env": dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item),
    }
