"""Where clnet keeps what it can rebuild: downloads, tuning results, compiled programs."""
from __future__ import annotations

import json
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


def read_json(path: Path) -> dict:
    """The JSON object in `path` (a cache of measurements), or {} where it is missing, unreadable
    or not an object: what it held is measured again."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def update_json(path: Path, entries: dict) -> None:
    """Add `entries` to the JSON object in `path` (a cache of measurements) without losing what
    another process added since this one read it (MPI ranks tuning at once): under a lock on
    `path` + ".lock", the file is read again, merged and replaced (write_atomically)."""
    with system.exclusive(path.with_name(path.name + ".lock")):
        stored = read_json(path)
        stored.update(entries)
        write_atomically(path, json.dumps(stored, indent=1, sort_keys=True).encode())
