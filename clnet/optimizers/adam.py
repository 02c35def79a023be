from .base import Optimizer


class Adam(Optimizer):
    names = ("adam",)
    source, kernel_name = "optimizers/adam.cl", "AdamUpdate"
    slots = {"first_moment": 0.0, "second_moment": 0.0}
    defaults = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}

    def scalars(self):
        return (*self.hyper.values(), self.iterations)  # bias correction needs the step count
