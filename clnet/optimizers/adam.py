import math

from .base import Optimizer


class Adam(Optimizer):
    names = ("adam",)
    source, kernel_name = "optimizers/adam.cl", "AdamUpdate"
    defaults = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False}

    def slot_initials(self):
        slots = {"first_moment": 0.0, "second_moment": 0.0}
        if self.hyper["amsgrad"]:
            slots["max_second_moment"] = 0.0
        return slots

    def defines(self):
        return {"AMSGRAD": int(self.hyper["amsgrad"])}

    def scalars(self, learning_rate):
        # Keras folds the bias correction into the step size, t counting this step.
        h, t = self.hyper, self.iterations + 1
        alpha = learning_rate * math.sqrt(1 - h["beta_2"] ** t) / (1 - h["beta_1"] ** t)
        return (alpha, h["beta_1"], h["beta_2"], h["epsilon"])


class AdamW(Adam):
    """Adam with decoupled weight decay, 0.004 by default as in Keras."""
    names = ("adamw",)

    def __init__(self, learning_rate=None, *, weight_decay=0.004, **kwargs):
        if weight_decay is None:
            raise ValueError("AdamW weight_decay must be a non-negative number (Keras's default 0.004), got None")
        super().__init__(learning_rate, weight_decay=weight_decay, **kwargs)
