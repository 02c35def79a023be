"""clnet's version, as pip installed it: in a module of its own, so that the modules that record it
(checkpoints, caches, ONNX files) need not import the package that imports them."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("clnet")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
