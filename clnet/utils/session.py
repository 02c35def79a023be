from ..dtype_policies import reset_global_policy
from ..layers.base import clear_names


def clear_session() -> None:
    """As `keras.utils.clear_session()`: the automatic layer names start again (the next Dense is
    `dense` once more; names reserved by files loaded before are freed) and the global dtype
    policy is unset (clnet.floatx()'s again). Models and layers made before keep working."""
    clear_names()
    reset_global_policy()
