"""Writing output files so that a failed or interrupted write never leaves half a file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tinsmith.errors import TinsmithError
from tinsmith.escape import make_path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_if_changed(path: Path, data: bytes) -> Path:
    """Write `data` atomically (temp file + rename); an unchanged file is left alone, timestamp
    included, so builds that depend on it do not redo work."""
    path = Path(path)
    if path.exists() and path.read_bytes() == data:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def touch(path: Path, data: bytes) -> Path:
    """Write `data` atomically and give the file the current time even when its bytes did
    not change: a stamp that tells build tools a step ran."""
    path = write_if_changed(path, data)
    os.utime(path)
    return path


def make_rule(targets, prerequisites) -> str:
    """A dependency-only Make rule, as compilers write with -MD -MP: `targets: prerequisites`,
    then an empty rule per prerequisite, so that a deleted prerequisite reruns the step
    instead of stopping the build."""
    try:
        head = " ".join(make_path(t) for t in targets)
        body = "".join(f" \\\n  {make_path(p)}" for p in prerequisites)
        return f"{head}:{body}\n" + "".join(f"\n{make_path(p)}:\n" for p in prerequisites)
    except ValueError as e:
        raise TinsmithError(None, f"cannot write a dependency file: {e}", "rename the file or folder") from None


def irregular_file(path: Path) -> str | None:
    """Why `path` cannot be read as an input file, or None for a regular file (or one that does
    not exist, which the reader reports itself). A FIFO, socket or device would block a read for
    ever or never end, so only regular files are opened (symbolic links are followed)."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # (readers report directories themselves)
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        return f"it is {kind}, not a regular file"
    return None
