"""Where clnet's warnings point: at the user's line, however deep clnet's calls are.

A fixed `stacklevel` counts frames, and a decorator or a helper added between the user's call and
the warning moves it into clnet's own files; this counts instead.
"""
from __future__ import annotations

import os
import sys

PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def outside_clnet() -> int:
    """The `stacklevel` for `warnings.warn` called by this function's caller that names the first line
    outside clnet on the way up (the user's line that made, built or fit the model, or the user's
    callback or layer that clnet called)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
