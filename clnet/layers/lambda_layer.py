"""Lambda: a Python function of tensors as a layer, as Keras's."""
from __future__ import annotations

from .base import KerasTensor, Layer, leaves_of, tensors_of
from .input import PassThrough


class Lambda(PassThrough):
    """`Lambda(lambda x: ops.exp(x) * 2)(h)`: calling it on symbolic tensors calls `function` on
    them, and the clnet.ops calls (and any layer calls) inside become calls of the graph, which the
    model runs forward and backward as it runs any. The Lambda itself then marks each tensor the
    function returns by a call of its own that computes nothing (its output is its input's buffer,
    its gradient the output's), so that the model lists it, by its name. On numpy arrays it calls
    `function` on them: clnet.ops compute them eagerly.

    `output_shape`, if given (with or without the batch axis), is checked against the shape the
    function's ops give. A Lambda's function is Python code, not configuration, so a model that
    holds one cannot be saved (get_config raises, as Keras refuses one in safe mode).

    `arguments`, if given, is a dict of keyword arguments passed to `function` on every call, as
    Keras's. Keras's `mask` argument is not taken. A Lambda runs its function when it is called,
    so it belongs in the functional API: a `Sequential` of one raises."""
    mask_handling = "propagate"  # (a step at a time: the input's mask goes on)


    def __init__(self, function, output_shape=None, name=None, arguments=None):
        super().__init__(name)
        if not callable(function):
            raise TypeError(f"Lambda: function must be callable, got {type(function).__name__}")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError(f"Lambda: arguments must be a dict of keyword arguments for function, got "
                            f"{type(arguments).__name__}")
        self.function, self.arguments = function, dict(arguments or {})
        self.expected_shape = None if output_shape is None else tuple(output_shape)
        self._marking = False

    def __call__(self, inputs):
        inputs = tensors_of(inputs)  # an Input stands for its output, as in any layer call
        if not any(isinstance(t, KerasTensor) for t in leaves_of(inputs)):
            return self.function(inputs, **self.arguments)  # eager: numpy in, numpy out
        result = self.function(inputs, **self.arguments)
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        for i, t in enumerate(outputs):
            if not isinstance(t, KerasTensor):
                raise TypeError(f"{self.describe()}: function must return symbolic tensors (made by clnet.ops or layer "
                                f"calls from its inputs), but returned {type(t).__name__}"
                                + (f" at position {i}" if len(outputs) > 1 else ""))
        if self.expected_shape is not None:
            shapes = [t.shape for t in outputs]
            wanted = self.expected_shape
            if not all(wanted in (t.shape, t.sample_shape) for t in outputs):
                raise ValueError(f"{self.describe()}: output_shape {wanted} was given, but function returns tensors of "
                                 f"shape {shapes[0] if len(shapes) == 1 else shapes}")
        self._marking = True
        try:
            marked = [Layer.__call__(self, t) for t in outputs]
        finally:
            self._marking = False
        return marked if isinstance(result, (list, tuple)) else marked[0]

    def compute_output_shapes(self, input_shape):
        if not self._marking:  # a Sequential makes its calls itself, without running the function
            raise TypeError(f"{self.describe()}: a Lambda runs its function on symbolic tensors when it is called, "
                            "which a Sequential model does not do; use the functional API: "
                            "Model(inputs, Lambda(function)(x))")
        return [tuple(input_shape)]

    def get_config(self):
        raise ValueError(f"{self.describe()} cannot be saved: its function is Python code, which a config (JSON) "
                         "cannot hold. Save the weights (save_weights) and build the model in code again, or write "
                         "the computation as clnet.ops calls without a Lambda; those are saved as layers of the graph")
