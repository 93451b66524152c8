"""Python's inventory: the distributions installed in the sandbox's venv (read by miner's
assets/inventory.py inside it) and the probes derived from the project's own (`import pkg`, each
console script's `--help`).

The venv lies beneath every project miner builds, so its inventory is read for all of them
(miner.ecosystems.read_inventory).
"""

from __future__ import annotations

import json
import shlex
from importlib import resources

from miner.ecosystems.base import InventoryError, ProbeKind
from miner.models import PROJECT_DIR, SANDBOX_ROOT, Distribution, Probe
from miner.sandbox.base import Sandbox

MINER_DIR = f"{SANDBOX_ROOT}/.miner"


def collect_inventory(sandbox: Sandbox) -> tuple[str, list[Distribution], list[str]]:
    """(site-packages, distributions, the project's own distributions) read inside the sandbox."""
    sandbox.put(f"{MINER_DIR}/inventory.py", resources.files("miner").joinpath("assets", "inventory.py").read_bytes())
    result = sandbox.run(f'"$MINER_PYTHON" {MINER_DIR}/inventory.py', timeout=120)
    if result.exit_code != 0:
        raise InventoryError(f"cannot read installed distributions: {result.output[-500:]}")
    data = json.loads(result.output.strip().splitlines()[-1])
    dists = [Distribution(**{k: v for k, v in d.items() if k != "url"}) for d in data["dists"]]
    own = [d["name"] for d in data["dists"] if d.get("url", "").startswith(f"file://{PROJECT_DIR}")]
    return data["site_packages"], dists, own


def discover_probes(inventory: list[Distribution], own: list[str]) -> list[Probe]:
    """Derived checks for the project's own distributions: imports and console scripts."""
    probes: dict[str, Probe] = {}  # by id: a project can show up twice (src/*.egg-info and the venv)
    for dist in (d for d in inventory if d.name in own):
        for module in dist.top_level:
            if module.startswith("_") or module in {"tests", "test", "testing", "docs"}:
                continue
            probes.setdefault(f"probe::import::{module}", Probe(id=f"probe::import::{module}", kind="import", module=module))
        for script in sorted(dist.console_scripts):
            probes.setdefault(f"probe::script::{script}", Probe(id=f"probe::script::{script}", kind="script",
                                                                argv=[script, "--help"]))
    return list(probes.values())


def _printed(message: list[str]) -> str:
    """The program's own first line after miner's summary ("exit 1 (healthy: 0)"), unless the
    program could not even start (then the line is Python's wording of the error, not the shell's)."""
    return "" if len(message) < 2 or message[1].startswith("[Errno") else message[1]


PROBE_KINDS = (
    ProbeKind("import", label=lambda module: f"import {module}",
              command=lambda probe: f"python -c {shlex.quote('import ' + probe.module)}" if probe.module else "",
              printed=_printed),
    ProbeKind("script", label=lambda script: f"{script} --help", command=lambda probe: "", printed=_printed),
)
