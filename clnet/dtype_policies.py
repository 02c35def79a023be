"""Keras's dtype policies: what a layer computes in and keeps its variables in.

A policy is a name: "float32" or "float64" (both in that type), "mixed_float16" and
"mixed_bfloat16" (computations and activations in 16 bits, variables and optimizer state in
float32), "float16" and "bfloat16" (everything in 16 bits). A layer takes one as `dtype=`
(a name or a DTypePolicy); without it, the global policy when the layer is made
(`clnet.mixed_precision.set_global_policy`), which is `clnet.floatx()` until one is set.

clnet computes a model in one float type, its `floatx` (by default the global policy's, see
floatx_of); a layer given a `dtype=` of float32 or float64 variables must agree with its model's.
A policy of 16-bit computations is taken as Keras's (names, configs, checkpoints and Keras archives
keep it), but clnet's only 16-bit kernels are the Dense layers' matrix products on NVIDIA's tensor
cores (products/mma_half.cl, wgmma_half.cl: operands rounded to 16 bits, float sums, taken where the tuner
measures them faster); everything else computes in float32, and a model of such layers warns once,
with a PrecisionFallbackWarning, when it is built."""
from __future__ import annotations

import warnings

from .cl.runtime import floatx
from .stacklevel import outside_clnet

# A policy's name -> (compute dtype, variable dtype), Keras's.
POLICIES = {"float32": ("float32", "float32"), "float64": ("float64", "float64"),
            "mixed_float16": ("float16", "float32"), "mixed_bfloat16": ("bfloat16", "float32"),
            "float16": ("float16", "float16"), "bfloat16": ("bfloat16", "bfloat16")}
SIXTEEN_BITS = ("float16", "bfloat16")


class PrecisionFallbackWarning(UserWarning):
    """A model's layers ask for 16-bit computations, which clnet computes in float32 (the warning
    names the layers, the policy and why)."""


class DTypePolicy:
    """Keras's `DTypePolicy` (also `clnet.mixed_precision.Policy`): `name` (one of POLICIES; None is
    the global policy's), `compute_dtype`, `variable_dtype` (names, as Keras gives them; what clnet
    computes in is the model's floatx, see the module's note). Equal policies compare equal;
    `get_config()` is `{"name": name}`."""

    def __init__(self, name: str | None = None):
        if name is None:
            name = global_policy().name
        if not isinstance(name, str):
            raise TypeError(f"'name' must be a string, such as 'mixed_float16'. Received: name={name!r} "
                            f"(of type {type(name)})")
        if name not in POLICIES:
            raise ValueError(f"Cannot convert {name!r} to a dtype policy clnet computes in: valid policies are "
                             f"{', '.join(map(repr, POLICIES))}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        return POLICIES[self._name][0]

    @property
    def variable_dtype(self) -> str:
        return POLICIES[self._name][1]

    @property
    def quantization_mode(self) -> None:
        return None  # (Keras's quantized policies are not taken)

    def get_config(self) -> dict:
        return {"name": self._name}

    @classmethod
    def from_config(cls, config: dict) -> "DTypePolicy":
        return cls(**config)

    def __eq__(self, other) -> bool:
        return isinstance(other, DTypePolicy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f'<DTypePolicy "{self._name}">'


_global_policy: DTypePolicy | None = None  # None: clnet.floatx()'s


def set_global_policy(policy) -> None:
    """Keras's `set_global_policy` (and `keras.config.set_dtype_policy`): the policy of layers made
    afterwards without `dtype=`, and of models made afterwards (a name or a DTypePolicy). Models
    and layers made already keep theirs."""
    global _global_policy
    if isinstance(policy, str):
        policy = DTypePolicy(policy)
    if not isinstance(policy, DTypePolicy):
        raise ValueError("Invalid `policy` argument. Expected the string name of a policy (such as "
                         f"'mixed_float16') or a `DTypePolicy` instance. Received: policy={policy!r} "
                         f"(of type {type(policy)})")
    _global_policy = policy


def global_policy() -> DTypePolicy:
    """The global policy: the one set last, else clnet.floatx()'s ("float32" at the start)."""
    return DTypePolicy(floatx()) if _global_policy is None else _global_policy


def reset_global_policy() -> None:
    """Back to no policy set (clnet.floatx()'s), as `clnet.utils.clear_session()` does."""
    global _global_policy
    _global_policy = None


def policy_of(dtype, argument: str = "dtype") -> DTypePolicy:
    """The policy a layer's `dtype=` argument names: None (the global policy), a name, a
    DTypePolicy, or Keras's serialized form ({"class_name": "DTypePolicy", "config": {"name": ...}})."""
    if dtype is None:
        return global_policy()
    if isinstance(dtype, DTypePolicy):
        return dtype
    if isinstance(dtype, dict) and isinstance(dtype.get("config"), dict) and dtype.get("class_name") in (
            "DTypePolicy", "Policy"):
        return DTypePolicy.from_config(dtype["config"])
    if isinstance(dtype, str):
        try:
            return DTypePolicy(dtype)
        except ValueError as e:
            raise ValueError(f"{argument}={dtype!r}: {e}") from None
    raise ValueError(f"Cannot interpret `{argument}` argument. Expected a string or an instance of DTypePolicy. "
                     f"Received: {argument}={dtype!r}")


def floatx_of(policy: DTypePolicy) -> str:
    """The float type clnet computes a model of this policy in: float64 for float64 variables,
    else float32 (the mixed and 16-bit policies too, see the module's note)."""
    return "float64" if policy.variable_dtype == "float64" else "float32"


def default_floatx() -> str:
    """The float type of a model made now without `floatx=`: the global policy's (floatx_of) where
    a policy was set, else clnet.floatx()."""
    return floatx() if _global_policy is None else floatx_of(_global_policy)


def warn_sixteen_bits(model_name: str, layers: dict[str, DTypePolicy], device: str, products: bool) -> None:
    """Say once per model build that the layers named in `layers` (name -> policy) compute in
    float32 on `device`, and why; `products`: but for the Dense layers' matrix products (those of
    Dense, its joined form and attention's projections) and, on Hopper, convolutions', which may
    run in 16 bits here."""
    if not layers:
        return
    named = ", ".join(f"{name!r} ({policy.name})" for name, policy in list(layers.items())[:4])
    if len(layers) > 4:
        named += f" and {len(layers) - 4} more"
    what = ("their Dense products in 16 bits on the tensor cores where the tuner measures that faster (on Hopper "
            f"convolutions' too), and the rest in float32 on {device}: clnet has no other 16-bit kernels yet"
            if products else
            f"them in float32 on {device}: clnet's 16-bit kernels are the Dense products' (and on Hopper "
            "convolutions') on NVIDIA's tensor cores (compute capability 8.0 on), and this device has none")
    warnings.warn(f"model {model_name!r}: its layers {named} ask for 16-bit computations; clnet computes {what}. "
                  "Variables are kept in float32", PrecisionFallbackWarning, stacklevel=outside_clnet())

