"""The trusted part of an exported verifier: the static boot tool and the runtime list it checks.

    binary = boot_binary(cache_dir)                  # bytes of tests/boot
    text = runtime_text(manifest)                    # tests/runtime.txt

The boot tool (miner/assets/boot.c) is compiled on the exporting host with its C compiler (CC,
default cc) and no C library at all (-nostdlib -static), so it runs in any Linux container of the
same architecture without reading one of its files: about 20 kB. It is compiled once per source,
compiler and architecture and cached. The runtime list is what the healthy manifest measured
(miner/assets/verifier_system.py, runtime_list).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import uuid
from importlib import resources
from pathlib import Path

ARCHITECTURES = ("x86_64", "aarch64")
FLAGS = ("-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector", "-fno-pie", "-no-pie",
         "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-O2", "-s", "-Wl,--build-id=none")
BOOT_NAME = "boot"
RUNTIME_NAME = "runtime.txt"


class BootBuildError(Exception):
    """The boot tool cannot be built here; the message says why."""


def boot_source() -> bytes:
    return resources.files("miner").joinpath("assets", "boot.c").read_bytes()


def compiler() -> str:
    name = os.environ.get("CC", "cc")
    found = shutil.which(name)
    if not found:
        raise BootBuildError(f"no C compiler ({name}) to build the verifier's boot tool: install gcc and the "
                             "C library headers (apt-get install gcc libc6-dev), or set CC")
    return found


def compiler_identity(cc: str) -> str:
    done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.splitlines()[0] if done.stdout else cc


def boot_binary(cache: Path) -> bytes:
    """The compiled boot tool (from the cache when this source, compiler and machine built it before)."""
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        raise BootBuildError(f"the verifier's boot tool supports {', '.join(ARCHITECTURES)}, not {machine}")
    cc = compiler()
    source = boot_source()
    key = hashlib.sha256(source + compiler_identity(cc).encode() + machine.encode()
                         + " ".join(FLAGS).encode()).hexdigest()[:24]
    path = Path(cache) / f"boot-{key}"
    if path.is_file():
        return path.read_bytes()
    with tempfile.TemporaryDirectory(prefix="miner-boot-") as tmp:
        src, out = Path(tmp) / "boot.c", Path(tmp) / BOOT_NAME
        src.write_bytes(source)
        done = subprocess.run([cc, *FLAGS, "-o", str(out), str(src)], capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise BootBuildError("the verifier's boot tool does not compile: " + " / ".join(tail))
        data = out.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_suffix(f".{uuid.uuid4().hex[:6]}.tmp")
    tmp_path.write_bytes(data)
    tmp_path.replace(path)
    return data


def runtime_text(manifest: dict) -> str:
    """tests/runtime.txt: the manifest's runtime entries, one "KIND SHA256 PATH" line each."""
    lines = ["# the verifier's runtime as measured in the healthy image: tests/boot checks it before it runs\n"]
    for kind, digest, path in manifest.get("runtime", []):
        if "\n" in path:
            continue  # a path the list cannot hold is left out (it is then checked as a system file)
        lines.append(f"{kind} {digest} {path}\n")
    return "".join(lines)
