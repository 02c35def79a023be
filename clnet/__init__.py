"""clnet: a small deep-learning framework whose every kernel is OpenCL, on any OpenCL device."""
from . import (activations, callbacks, datasets, distribute, initializers, layers, losses, metrics, mixed_precision,
               onnx, ops, optimizers, utils)
from .cl.device import DeviceError, devices
from .cl.runtime import BuildError, floatx, runtime, set_device, set_floatx
from .cl.tensor import Tensor
from .data import PyDataset
from .layers import Input
from .model import Model, NotBuiltError, NotCompiledError, Sequential, set_seed
from .profiler import profile
from .saving import load_model
from . import models  # (after model and saving, which it names)
from ._version import __version__

__all__ = ["Model", "Input", "Sequential", "layers", "activations", "losses", "optimizers", "callbacks", "datasets",
           "initializers", "onnx", "devices", "set_device", "runtime", "set_floatx", "floatx", "set_seed", "Tensor",
           "DeviceError", "BuildError", "NotBuiltError", "NotCompiledError", "profile", "load_model", "PyDataset",
           "distribute", "utils", "ops", "models", "metrics", "mixed_precision"]
