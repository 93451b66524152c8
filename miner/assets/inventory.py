"""Print, as JSON, the distributions installed in the running interpreter (run inside a sandbox).

Standalone on purpose: it is copied into sandboxes and containers and must not import miner.
"""

import json
import re
import sysconfig
from importlib import metadata

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(dist: metadata.Distribution) -> list[str]:
    """Its requirements as "name specifier" (markers and extras of the requirement left out),
    without those of optional extras."""
    found = []
    for req in dist.requires or []:
        if "extra ==" in req.replace('"', "'").replace("extra==", "extra =="):
            continue  # optional extras are not installed dependencies
        match = NAME.match(req)
        if match:
            spec = re.sub(r"^\[[^\]]*\]", "", req[match.end():].split(";", 1)[0].strip()).strip().strip("()")
            found.append(f"{canonical(match.group(1))} {spec}".strip())
    return sorted(set(found))


def requirement_names(dist: metadata.Distribution) -> list[str]:
    return sorted({req.split(" ", 1)[0] for req in requirements(dist)})


def top_level(dist: metadata.Distribution, files: list[str]) -> list[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return sorted({line.strip() for line in text.split() if line.strip()})
    tops = set()
    for path in files:
        head = path.split("/", 1)[0]
        if head.endswith(".py"):
            tops.add(head[:-3])
        elif "/" in path and not head.endswith((".dist-info", ".egg-info", ".data")) and head != "__pycache__":
            tops.add(head)
    return sorted(t for t in tops if t.isidentifier())


def editable_root(dist: metadata.Distribution) -> str:
    text = dist.read_text("direct_url.json")
    if not text:
        return ""
    info = json.loads(text)
    return info.get("url", "") if info.get("dir_info", {}).get("editable") or "url" in info else ""


def main() -> None:
    dists = []
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        every = [str(f) for f in (dist.files or []) if not str(f).startswith("..")]
        files = [f for f in every if f.endswith(".py")]
        dists.append({
            "name": canonical(name),
            "version": dist.version,
            "top_level": top_level(dist, files),
            "requires": requirement_names(dist),
            "requirements": requirements(dist),
            "extensions": sorted(f for f in every if f.endswith(".so") and ".libs/" not in f),
            "console_scripts": {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"},
            "files": sorted(files),
            "url": editable_root(dist),
        })
    print(json.dumps({"site_packages": sysconfig.get_paths()["purelib"], "dists": dists}))


if __name__ == "__main__":
    main()
