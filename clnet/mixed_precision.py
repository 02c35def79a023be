"""Keras's `keras.mixed_precision`: dtype policies (what layers compute in and keep their
variables in), the global one, and LossScaleOptimizer (also clnet.optimizers'). See
clnet/dtype_policies.py for what clnet computes a policy in."""
from .dtype_policies import (DTypePolicy, PrecisionFallbackWarning, global_policy,
                             set_global_policy)
from .optimizers import LossScaleOptimizer

Policy = DTypePolicy  # Keras's other name for it
dtype_policy = global_policy  # (Keras 3's keras.config names)
set_dtype_policy = set_global_policy

__all__ = ["DTypePolicy", "Policy", "global_policy", "set_global_policy", "dtype_policy", "set_dtype_policy",
           "PrecisionFallbackWarning", "LossScaleOptimizer"]
