"""Carry an agent's changes into a separate verifier's container (standalone; imports nothing of miner).

In the verifier mode "separate", the harness stops the agent's container and starts a fresh one of
the task's (broken) image for the verifier: no process of the agent's exists there. What the agent
changed arrives as data. In the agent's container, before it is stopped, SNAPSHOT (a shell
command the harness runs there, [[verifier.collect]] in task.toml) writes into the artifacts
folder the files, folders and links whose inode changed after the image was built (ctime newer
than MARKER, which the image's last layer creates: no process can set a ctime back), and the full
entry list of each changed folder, so that removals can be replayed. In the fresh container the
boot tool runs this file (the image's own interpreter, -I -S, before anything is checked):

    python -I -S -B restore.py ARTIFACTS_DIR

It writes those entries over the fresh image and removes what the agent removed. The archive is
the agent's data and is treated as such: nothing under the harness's folders, no path with "..",
nothing written through a symlink, no device files. Exit 0 when restored; 1 with a line saying why
not (the boot tool then scores 0).
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile

MARKER = "/var/lib/miner/built"
ARCHIVE, FOLDERS, ENTRIES = "miner-state.tar", "miner-folders", "miner-entries"
# Never carried: the kernel's, the harness's and scratch folders.
SKIP = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/logs", "/tests", "/solution", "/oracle",
        "/etc/hosts", "/etc/hostname", "/etc/resolv.conf")  # the last three: files Docker mounts
PRUNE = " -o ".join(f"-path {p}" for p in SKIP)
# A folder the collector cannot read (root without CAP_DAC_READ_SEARCH: apt's 0700 `partial`) is
# left out with what is in it: what the agent changed there is lost, which can only cost it a repair.
UNREADABLE = "\\( -type d ! -readable \\) -prune"
SNAPSHOT = (
    "set -e; A=/logs/artifacts; mkdir -p $A; "
    f"find / -xdev \\( {PRUNE} \\) -prune -o {UNREADABLE} -o -cnewer {MARKER} -print0 > $A/{ENTRIES}.changed; "
    f"find / -xdev \\( {PRUNE} \\) -prune -o {UNREADABLE} -o -type d -cnewer {MARKER} -print0 > $A/{FOLDERS}; "
    f"xargs -0 -r -I{{}} find {{}} -mindepth 1 -maxdepth 1 -print0 < $A/{FOLDERS} > $A/{ENTRIES}; "
    f"tar --null --no-recursion -T $A/{ENTRIES}.changed -cf $A/{ARCHIVE}"
)


class Refused(Exception):
    """The archive asks for something this file does not do."""


def skipped(path: str) -> bool:
    """Under a folder never carried, or a mount point of the container (another file system's)."""
    if any(path == p or path.startswith(p + "/") for p in SKIP):
        return True
    try:
        return os.lstat(path).st_dev != os.lstat(os.path.dirname(path)).st_dev
    except OSError:
        return False


def read_list(path: str) -> list[str]:
    with open(path, "rb") as handle:
        return [os.fsdecode(p) for p in handle.read().split(b"\0") if p]


def target_of(name: str) -> str:
    """The absolute path an archive member names ("/" for the root), refused when it leaves the tree."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(f"the archive names {name!r}")
    return "/" + "/".join(parts)


def clear(path: str) -> None:
    """Remove whatever is at path (a folder with what is in it), never following a symlink."""
    if os.path.islink(path) or not os.path.isdir(path):
        if os.path.lexists(path):
            os.unlink(path)
        return
    os.chmod(path, 0o700)  # no CAP_DAC_OVERRIDE: a folder of mode 000 is kept open for the owner only
    shutil.rmtree(path)


def place(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> None:
    parent = os.path.dirname(path)
    if os.path.realpath(parent) != parent:
        raise Refused(f"{path} would be written through a symlink")
    os.makedirs(parent, exist_ok=True)
    mode = member.mode & 0o7777
    if member.isdir():
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            clear(path)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        return
    clear(path)
    if member.issym():
        os.symlink(member.linkname, path)
    elif member.islnk():
        source = target_of(member.linkname)
        if os.path.realpath(os.path.dirname(source)) != os.path.dirname(source) or os.path.islink(source):
            raise Refused(f"{path} would be linked through a symlink")
        os.link(source, path)
    elif member.isfile():
        data = tar.extractfile(member)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            shutil.copyfileobj(data, handle)
        os.chmod(path, mode)
    elif member.isfifo():
        os.mkfifo(path, mode)
    else:
        raise Refused(f"{path} is a device or another special file")
    if not member.issym():
        os.utime(path, (member.mtime, member.mtime))


def restore(folder: str) -> int | None:
    """Apply the snapshot in `folder`; the number of entries written, None when there is none (a
    harness that shares the agent's container: nothing to carry; a separate container without it
    holds the untouched broken state, which scores 0)."""
    if not os.path.isfile(os.path.join(folder, ARCHIVE)):
        return None
    written = 0
    with tarfile.open(os.path.join(folder, ARCHIVE)) as tar:
        for member in tar:
            path = target_of(member.name)
            if path == "/":
                continue  # the root folder itself: its entries follow
            if skipped(path):
                continue  # the harness's and the kernel's: not the agent's to carry
            place(tar, member, path)
            written += 1
    present = set(read_list(os.path.join(folder, ENTRIES)))
    for changed in read_list(os.path.join(folder, FOLDERS)):
        path = target_of(changed)
        if skipped(path) or os.path.islink(path) or not os.path.isdir(path):
            continue
        for name in os.listdir(path):
            entry = os.path.join(path, name)
            if entry not in present and not skipped(entry):
                clear(entry)  # the agent removed it
    return written


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: restore.py ARTIFACTS_DIR", file=sys.stderr)
        return 2
    try:
        written = restore(sys.argv[1])
    except (Refused, OSError, tarfile.TarError) as exc:
        print(f"verifier: REJECT: the agent's changes cannot be carried into the verifier's container: {exc}",
              flush=True)
        return 1
    if written is None:
        print(f"verifier: no {ARCHIVE} in {sys.argv[1]}: nothing carried in (the agent's own container, or a "
              "fresh one left as the task's image built it)", flush=True)
    else:
        print(f"verifier: the agent's changes carried into a fresh container ({written} entries)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
