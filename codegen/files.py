"""Writing output files so that a failed or interrupted write never leaves half a file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
