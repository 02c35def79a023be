from .base import Optimizer


class AdaGrad(Optimizer):
    names = ("adagrad",)
    source, kernel_name = "optimizers/adagrad.cl", "AdaGradUpdate"
    slots = {"accumulator": 0.1}  # Keras's initial_accumulator_value
    defaults = {"epsilon": 1e-7}
