"""Where clnet keeps what it can rebuild: downloads, tuning results, compiled programs."""
from __future__ import annotations

import os
from pathlib import Path

from . import system


def cache_dir() -> Path:
    """$CLNET_CACHE_DIR, else the user's cache directory as the system names it: Linux
    $XDG_CACHE_HOME/clnet or ~/.cache/clnet, macOS ~/Library/Caches/clnet, Windows
    %LOCALAPPDATA%\\clnet\\Cache."""
    if os.environ.get("CLNET_CACHE_DIR"):
        return Path(os.environ["CLNET_CACHE_DIR"])
    return system.user_cache_dir("clnet")


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a part: write aside, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as f:
            f.write(data)
        system.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
