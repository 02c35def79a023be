from .base import Optimizer


class SGD(Optimizer):
    names = ("sgd",)
    source, kernel_name = "optimizers/sgd.cl", "SGDUpdate"
    learning_rate_default = 0.01
