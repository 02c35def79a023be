"""clnet.ops: Keras 3's ops (keras.ops names and semantics) on symbolic tensors and on numpy arrays.

On symbolic tensors (an Input, a layer call's output) each op is a layer call of the graph, run by
Model like any layer, forward and backward: `y = ops.exp(Dense(8)(x)) * 2`. Operands that are not
symbolic (Python numbers, numpy arrays) are constants of the op, not inputs of the model. The
batch axis (axis 0, None) is never broadcast, reduced, moved or indexed: `axis` arguments count
it as Keras does, and naming it raises.

On numpy arrays alone (eager use, as keras.ops) an op returns a numpy array computed by the same
kernels on the device: the op is built for one sample, the whole array (its axis 0 is then an
ordinary axis, so every axis may be reduced, moved or indexed), runs once and is read back. It
computes in float64 if an operand is a float64 array, else in clnet.floatx(); Python numbers
do not decide the type, as in Keras.

Symbolic tensors have Python's operators (+ - * / ** @, unary -, abs, > < >= <=, x[...] basic
slicing); == and != stay identity, as in Keras. clnet.layers.Lambda wraps a function of them.

fuse_elementwise(calls, outputs) is a graph pass: each tree of elementwise calls whose inner
tensors are read once becomes one call with a generated forward and gradient kernel (fusion.py
says how Model.build runs its steps over it).

A model of ops exports to ONNX (model.export): each op layer writes standard ONNX ops in the form
the opset takes (its to_onnx; a fused tree its ops one by one, a Lambda nothing), and
clnet.onnx.load reads them back as the op layers, or as the layer that computes the same where
clnet has one (an add of two tensors of one shape as the Add merge, tanh as an Activation, a
product by a constant matrix as a Dense, ...: see clnet/onnx/importer.py's table)."""
from .elementwise import (abs, absolute, add, clip, divide, equal, exp, gelu, greater, greater_equal, less,
                          less_equal, log, maximum, minimum, multiply, negative, not_equal, ones_like, power, relu,
                          sigmoid, sqrt, square, subtract, tanh, true_divide, where, zeros_like)
from .reduction import amax, amin, argmax, argmin, max, mean, min, softmax, sum
from .indexing import getitem, slice, split, take
from .shape import (arange, cast, concatenate, convert_to_numpy, convert_to_tensor, expand_dims, ones, reshape, shape,
                    squeeze, stack, transpose, zeros)
from .matmul import dot, matmul
from .fusion import fuse_elementwise

__all__ = ["abs", "absolute", "add", "clip", "divide", "equal", "exp", "gelu", "greater", "greater_equal", "less",
           "less_equal", "log", "maximum", "minimum", "multiply", "negative", "not_equal", "ones_like", "power",
           "relu", "sigmoid", "sqrt", "square", "subtract", "tanh", "true_divide", "where", "zeros_like",
           "amax", "amin", "argmax", "argmin", "max", "mean", "min", "softmax", "sum", "getitem", "slice", "split", "take", "arange",
           "cast", "concatenate", "convert_to_numpy", "convert_to_tensor", "dot", "expand_dims", "ones", "reshape", "shape", "squeeze", "stack", "transpose",
           "zeros", "matmul",
           "fuse_elementwise"]
