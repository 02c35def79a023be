from .base import Optimizer


class Momentum(Optimizer):
    names = ("momentum",)
    source, kernel_name = "optimizers/momentum.cl", "MomentumUpdate"
    slots = {"velocity": 0.0}
    defaults = {"momentum": 0.9}
    learning_rate_default = 0.01
