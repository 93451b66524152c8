"""Run derived probes and print their raw results as JSON (run inside a sandbox or container).

Standalone on purpose (copied into sandboxes and exported tasks; imports nothing of miner).
Input: a JSON file with a list of probes {"id", "kind", "argv", "module"}. Output on stdout:
{id: {"exit": int, "digest": sha256 of the normalised output, "head": first lines}}.
"""

import hashlib
import json
import os
import subprocess
import sys

TIMEOUT = 60


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
        "digest": hashlib.sha256(stdout).hexdigest(),
        "head": output.decode("utf-8", "replace")[:2000],
    }


def main() -> None:
    with open(sys.argv[1]) as handle:
        probes = json.load(handle)
    print(json.dumps({p["id"]: run_probe(p) for p in probes}))


if __name__ == "__main__":
    main()
