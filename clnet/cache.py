"""Where clnet keeps what it can rebuild: downloads, tuning results, compiled programs."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$CLNET_CACHE_DIR, else $XDG_CACHE_HOME/clnet, else ~/.cache/clnet."""
    if os.environ.get("CLNET_CACHE_DIR"):
        return Path(os.environ["CLNET_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "clnet"
    return Path.home() / ".cache" / "clnet"


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a part: write aside, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
