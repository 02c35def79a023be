"""onnx is an optional dependency: imported only when a function needs it."""
from __future__ import annotations


def require(caller: str):
    """The onnx module, or an ImportError saying which extra installs it."""
    try:
        import onnx
    except ImportError as error:
        raise ImportError(f"{caller} needs the 'onnx' package, which is not installed; install clnet's "
                          "onnx extra: pip install 'clnet[onnx]'  (or: pip install onnx onnxruntime)") from error
    return onnx
