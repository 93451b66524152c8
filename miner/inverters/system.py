"""Targets beneath the project (the system and service families), decided from what a backend saw.

A pure function of the backend's observation (Backend.observe, kept as HealthyState.system; see
miner.sandbox.docker.observe) plus the project folder on the host:

    targets = system_targets(state.system) + service_targets(state.system, project.path, test_files)

Rule 8 (recoverable): every target says where its healthy state is recovered from, in
`attrs["evidence"]` (debian-archive, package-index, project-files or reversible) with what that
needs (the package and version that installed a file, the distribution on the index, the project
file that states a value), and nothing else: no copy of an original travels with a target, so the
catalogue's fix scripts recover from the evidence. What has no evidence is not a target.

syslib    a shared library an extension module the project imports loads (never the
          interpreter's own nor a core library): soname, package, version, modules
debpkg    a Debian package owning such libraries: version, libraries, modules
system    role=interpreter-symlink (/usr/bin/python3, the venv's python: their targets still exist),
          role=ca-bundle (rebuilt by update-ca-certificates), role=locale (C.utf8),
          role=zoneinfo (zones the project names), role=stdlib-module (a standard-library module
          the project imports and neither the test runner nor miner's helpers need) and
          role=stdlib-extension (a lib-dynload extension such a module loads): package and
          version of the file's package
service   a Dockerized service (an image that EXPOSEs ports): role=port (a config line holding an
          EXPOSEd port: the image states it), role=value (a config value its HTTP answer shows, that
          another project file states next to its key), role=dependency (a module the running
          service imports from site-packages, from the index or the Debian archive at its version)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from miner.inverters.procedural import wrong_value
from miner.inverters.targets import stated_in
from miner.models import Target
from miner.projectfiles import may_be_target

# Libraries every process needs: breaking them breaks the shell that would run the fix. The
# observation adds those the recovery tools load (apt, dpkg, tar, ...: "recovery_libraries").
CORE_LIBRARIES = ("libc.so", "ld-linux", "libm.so", "libpthread", "libdl.so", "librt.so", "libutil.so",
                  "libgcc_s", "libtinfo", "libselinux", "libpcre2", "libacl", "libattr", "libcrypt.so", "libz.so")


# Programs the repair itself runs (a Debian package reinstall): their packages are not broken.
RECOVERY_PROGRAMS = {"bash", "sh", "dash", "apt-get", "apt", "dpkg", "dpkg-deb", "tar", "gzip", "xz", "gpgv",
                     "env", "timeout", "sleep", "setsid", "coreutils", "readlink", "cat", "rm"}


def _core(soname: str, recovery: set[str] = frozenset()) -> bool:
    return soname.startswith(CORE_LIBRARIES) or soname in recovery


def _can_reinstall(observation: dict[str, Any]) -> bool:
    """Whether Debian packages can be reinstalled from the archive in this environment."""
    return bool(observation.get("dpkg") and (observation.get("tools") or {}).get("apt-get"))


def _debian(package: str | None, version: str | None) -> dict[str, Any] | None:
    if not package or not version:
        return None
    return {"package": package, "version": version, "evidence": "debian-archive"}


def system_targets(observation: dict[str, Any] | None) -> list[Target]:
    """Targets of the system family (see the module docstring); [] without an observation."""
    if not observation:
        return []
    archive = _can_reinstall(observation)
    interpreter = set(observation.get("extensions", {}).get("interpreter", {}).get("libraries", []))
    recovery = set(observation.get("recovery_libraries") or [])
    loaded = set(observation.get("loaded") or [])
    packages = observation.get("packages", {})
    targets: list[Target] = []
    owners: dict[str, list[dict[str, Any]]] = {}
    for soname, lib in sorted(observation.get("libraries", {}).items()):
        users = [u for u in lib.get("used_by", []) if u != "interpreter" and (not loaded or u in loaded)]
        package = lib.get("package")
        found = _debian(package, packages.get(package or "", {}).get("version")) if archive else None
        if not users or soname in interpreter or _core(soname, recovery) or not lib.get("path") or found is None:
            continue
        attrs = {"soname": soname, "modules": lib.get("modules", []), **found}
        targets.append(Target(kind="syslib", name=soname, path=lib["path"], attrs=attrs))
        owners.setdefault(package, []).append(lib)
    for package, libs in sorted(owners.items()):
        if any(_core(lib["soname"], recovery) or lib["soname"] in interpreter for lib in libs):
            continue
        modules = sorted({m for lib in libs for m in lib.get("modules", [])})
        attrs = {"libraries": [lib["soname"] for lib in libs], "modules": modules,
                 **_debian(package, packages[package]["version"])}
        targets.append(Target(kind="debpkg", name=package.split(":")[0], attrs=attrs))
    return targets + _system_files(observation, archive) + (_stdlib(observation) if archive else [])


def _stdlib(observation: dict[str, Any]) -> list[Target]:
    """Standard-library modules and the extensions they load, restorable from the Debian archive."""
    targets = []
    for module, entry in sorted((observation.get("stdlib") or {}).items()):
        found = _debian(entry.get("package"), entry.get("version"))
        if found and entry.get("path"):
            targets.append(Target(kind="system", name=f"stdlib:{module}", path=entry["path"],
                                  attrs={"role": "stdlib-module", "module": module, **found}))
        for ext in entry.get("extensions", []):
            found = _debian(ext.get("package"), ext.get("version"))
            if found and ext.get("path"):
                name = ext["path"].rsplit("/", 1)[-1].split(".", 1)[0]
                targets.append(Target(kind="system", name=f"stdlib-extension:{name}", path=ext["path"],
                                      attrs={"role": "stdlib-extension", "module": module, **found}))
    return targets


def _system_files(observation: dict[str, Any], archive: bool) -> list[Target]:
    system = observation.get("system", {})
    tools = observation.get("tools") or {}
    targets = []
    for key in ("python_symlink", "venv_python"):
        entry = system.get(key) or {}
        if entry.get("target") and entry.get("exists"):
            attrs = {"role": "interpreter-symlink", "link_target": entry["target"], "evidence": "reversible"}
            targets.append(Target(kind="system", name=key.replace("_", "-"), path=entry["path"], attrs=attrs))
    bundle = system.get("ca_bundle") or {}
    if bundle.get("exists") and tools.get("update-ca-certificates"):
        targets.append(Target(kind="system", name="ca-bundle", path=bundle["path"],
                              attrs={"role": "ca-bundle", "evidence": "reversible"}))
    locale = system.get("locale") or {}
    found = _debian(locale.get("package"), locale.get("version")) if archive else None
    if locale.get("exists") and found:
        targets.append(Target(kind="system", name="locale:C.utf8", path=locale["path"],
                              attrs={"role": "locale", "locale": "C.UTF-8", **found}))
    for zone in observation.get("zones", []):
        owner = (observation.get("zone_packages") or {}).get(zone) or {}
        found = _debian(owner.get("package"), owner.get("version")) if archive else None
        if found:
            targets.append(Target(kind="system", name=f"zoneinfo:{zone}", path=f"/usr/share/zoneinfo/{zone}",
                                  attrs={"role": "zoneinfo", "zone": zone, **found}))
    return targets


def _config_target(entry: dict[str, Any], ports: set[str], root: Path, tests: set[str]) -> Target | None:
    value, key, rel = entry["value"], entry["key"], entry["path"]
    if value in ports:
        role, new, where = "port", str(int(value) + 1), ["the image's EXPOSE"]
    elif entry.get("answered") and len(value) >= 3 and not value.isdigit():
        role, new, where = "value", wrong_value(value), stated_in(root, key, value, rel, tests)
        if not where:
            return None  # nothing but the config file itself holds the value: unrecoverable
    else:
        return None
    attrs = {"role": role, "key": key, "value": value, "new_value": new, "line": entry["line"],
             "evidence": "project-files", "stated_in": where}
    return Target(kind="service", name=f"{role}:{rel}:{key}", path=rel, attrs=attrs)


def _dependency(entry: dict[str, Any]) -> dict[str, Any] | None:
    """How a module the service imports is recovered: its distribution from the index (installed
    by pip, with pip there to reinstall it) or its Debian package from the archive."""
    python, debian = entry.get("python") or {}, entry.get("debian") or {}
    if python.get("installer") == "pip" and python.get("pip") and python.get("version"):
        return {"dist": python["dist"], "version": python["version"], "python": python["python"],
                "evidence": "package-index"}
    return _debian(debian.get("package"), debian.get("version"))


def service_targets(observation: dict[str, Any] | None, root: Path,
                    test_files: Iterable[str] = ()) -> list[Target]:
    """Targets of the service family (see the module docstring); [] unless a service was observed."""
    service = (observation or {}).get("service")
    if not service:
        return []
    ports = {str(p) for p in service.get("ports", [])}
    tests = set(test_files)
    targets = []
    for entry in service.get("config", []):
        if may_be_target(entry["path"], tests) and (target := _config_target(entry, ports, Path(root), tests)):
            targets.append(target)
    seen: set[str] = set()
    for entry in sorted(service.get("imports", []), key=lambda e: (e["module"].count("."), e["module"])):
        found = _dependency(entry)
        owner = found and (found.get("dist") or found.get("package"))
        if not found or owner in seen:
            continue
        seen.add(owner)
        targets.append(Target(kind="service", name=f"dependency:{entry['module']}", path=entry["path"],
                              attrs={"role": "dependency", "module": entry["module"], **found}))
    return targets


def _config_targets(observation: dict[str, Any] | None, root: Path, tests: set[str]) -> list[Target]:
    service = (observation or {}).get("service") or {}
    ports = {str(p) for p in service.get("ports", [])}
    return [t for entry in service.get("config", [])
            if may_be_target(entry["path"], tests) and (t := _config_target(entry, ports, Path(root), tests))]


def _verifier_package(package: str) -> bool:
    """Packages miner's own helpers in the task's image need (its verifier and probes are Python)."""
    return package.split(":")[0].startswith(("python3", "libpython3"))


def _package(packages: dict[str, dict[str, Any]], owner: dict[str, Any]) -> dict[str, Any]:
    """The entry of a Debian package among the traced ones: its libraries and programs."""
    return packages.setdefault(owner["package"], {**owner, "libraries": [], "programs": []})


def traced_targets(observation: dict[str, Any], root: Path, test_files: Iterable[str] = ()) -> list[Target]:
    """Targets beneath a project known only by its traced run: the Debian-packaged shared libraries
    it mapped and programs it ran (their packages too), the locale, time zone and CA files it
    read, and its service's config lines; each restored from the Debian archive or reversible.
    The image's own runtime (the program its command starts and what it links) is spared: every
    check runs it, so breaking it leaves no check passing."""
    found = observation.get("trace") or {}
    archive = _can_reinstall(observation)
    runtime = found.get("runtime") or {}
    spared = set(observation.get("extensions", {}).get("interpreter", {}).get("libraries", [])) \
        | set(observation.get("recovery_libraries") or []) | set(runtime.get("libraries") or [])
    targets: list[Target] = []
    packages: dict[str, dict[str, Any]] = {}
    for entry in found.get("files", []):
        soname, debian = entry["path"].rsplit("/", 1)[-1], entry.get("debian") or {}
        if entry.get("rel") is not None or not entry.get("library") or _core(soname, spared) or not archive:
            continue
        if not (owner := _debian(debian.get("package"), debian.get("version"))) or _verifier_package(owner["package"]):
            continue
        targets.append(Target(kind="syslib", name=soname, path=entry["real"],
                              attrs={"soname": soname, "modules": [], "probes": entry["probes"], **owner}))
        _package(packages, owner)["libraries"].append(soname)
    for entry in found.get("programs", []):
        if entry["real"] in (runtime.get("programs") or []):  # the interpreter every check runs
            continue
        debian = entry.get("debian") or {}
        owner = _debian(debian.get("package"), debian.get("version")) if archive else None
        if owner and entry["real"].rsplit("/", 1)[-1] not in RECOVERY_PROGRAMS and not _verifier_package(owner["package"]):
            _package(packages, owner)["programs"].append(entry["real"])
    for package, attrs in sorted(packages.items()):
        if not any(_core(s, spared) for s in attrs["libraries"]):
            targets.append(Target(kind="debpkg", name=package.split(":")[0], attrs={"modules": [], **attrs}))
    read = {e["real"] for e in found.get("files", [])}
    targets += [t for t in _system_files(observation, archive) if t.attrs["role"] != "interpreter-symlink"
                and t.path and any(r == t.path or r.startswith(t.path.rstrip("/") + "/") for r in read)]
    return targets + _config_targets(observation, root, set(test_files))


def targets_beneath(observation: dict[str, Any] | None, root: Path, test_files: Iterable[str] = (),
                    observed: bool = False) -> list[Target]:
    """Every target beneath the project: the system family's and the service family's; for a
    project known by observation (outside Python: miner.ecosystems.observed) with a traced run,
    what that run touched (traced_targets)."""
    if observed and observation and (observation.get("trace") or {}).get("files"):
        return traced_targets(observation, root, test_files)
    return system_targets(observation) + service_targets(observation, root, test_files)
