from .base import Optimizer


class RMSProp(Optimizer):
    names = ("rmsprop",)
    source, kernel_name = "optimizers/rmsprop.cl", "RMSPropUpdate"
    slots = {"mean_square": 0.0}
    defaults = {"rho": 0.9, "epsilon": 1e-7}
