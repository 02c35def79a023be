"""What every activation family shares: parameters (a, b), a registry, and its programs."""
from __future__ import annotations

from ..cl.runtime import Runtime


class Activation:
    """An activation with parameters `a` and `b`, as the MQL5 book's activations have.

    Subclasses set `name` (registry key), `function` (the prefix of the OpenCL functions
    `<function>_forward` / `<function>_derivative` in `source`), `kernel_prefix` (the book's
    kernel name, e.g. "Sigmoid" for SigmoidActivation) and `defaults` (their parameters).
    """

    registry: dict[str, type["Activation"]] = {}
    name = ""
    source = ""
    function = ""
    kernel_prefix = ""
    defaults: dict[str, float] = {}
    elementwise = True  # fusable into a Dense kernel's epilogue
    # `source` also defines <function>_forward_vector / _derivative_vector on VEC (VW lanes), which
    # Dense's CPU form and the recurrent layers apply; without, activations/vector.cl applies the
    # scalar functions lane by lane.
    vector_form = False
    # The derivative is exact when given y in place of x (ReLU: y > 0 exactly where x > 0), so a
    # layer need not keep x for it.
    derivative_from_output = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            Activation.registry[cls.name] = cls

    def __init__(self, **params):
        unknown = set(params) - set(self.defaults)
        if unknown:
            accepted = ", ".join(self.defaults) or "no parameters"
            raise TypeError(f"activation {self.name!r} got unknown parameter(s) {sorted(unknown)}; it takes {accepted}")
        values = {**self.defaults, **params}
        for key, value in values.items():
            if not isinstance(value, (int, float)) or value != value:
                raise TypeError(f"activation {self.name!r} parameter {key} must be a number, got {value!r}")
        self.params = {k: float(v) for k, v in values.items()}

    @property
    def a(self) -> float:
        return self.params.get("a", 0.0)

    @property
    def b(self) -> float:
        return self.params.get("b", 0.0)

    def get_config(self) -> dict:
        return {"name": self.name, **self.params}

    def to_onnx(self, graph, x: str) -> str:
        """Add ONNX nodes applying this activation to the tensor named `x` (see
        clnet/onnx/builder.py); return the result's name."""
        raise NotImplementedError(f"activation {self.name!r} has no ONNX export (to_onnx)")

    def program(self, rt: Runtime, dtype):
        """The standalone `<Prefix>Activation` / `<Prefix>Derivative` kernels of this activation."""
        return rt.program((self.source, "activations/elementwise.cl"), dtype,
                          {"ACT": self.function, "ACT_KERNEL": self.kernel_prefix})

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"{type(self).__name__}({params})"


def get(identifier=None, **params) -> Activation:
    """An activation from None (identity), a name, a config dict, or an Activation, as a layer's
    `activation` argument takes it. Names: `"linear"`, `"sigmoid"`, `"tanh"`, `"relu"`, `"lrelu"`
    (and Keras's `"leaky_relu"`, slope 0.2), `"swish"` (and `"silu"`), `"gelu"`, `"softplus"`,
    `"elu"`, `"softmax"`, in any case. `params` are the family's parameters by name (`a`, `b`:
    `get("lrelu", a=0.1)`); an unknown name or parameter raises. Unlike Keras, a Python function
    is not an activation here: use a `Lambda` layer or `clnet.ops`."""
    if isinstance(identifier, Activation):
        if params:
            raise TypeError("parameters cannot be given together with an Activation object")
        return identifier
    if isinstance(identifier, dict):
        params = {k: v for k, v in identifier.items() if k != "name"} | params
        identifier = identifier.get("name")
    key = "linear" if identifier in (None, "none", "None") else str(identifier).lower()
    key, preset = ALIASES.get(key, (key, {}))
    if key not in Activation.registry:
        raise ValueError(f"unknown activation {identifier!r}; expected one of {sorted(Activation.registry)} or None")
    return Activation.registry[key](**(preset | params))


# Keras's names for activations of ours, with Keras's defaults where they differ: its leaky_relu
# function's slope is 0.2 (its LeakyReLU layer's, and our lrelu's, 0.3).
ALIASES = {"leaky_relu": ("lrelu", {"a": 0.2}), "silu": ("swish", {})}
