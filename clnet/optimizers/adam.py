import math

from .base import Optimizer


class Adam(Optimizer):
    """Keras's `Adam` (`"adam"`), with Keras's bias correction folded into the step size: m = beta_1
    · m + (1 - beta_1) · g, v = beta_2 · v + (1 - beta_2) · g², w -= lr_t · m / (sqrt(v) + epsilon),
    lr_t = lr · sqrt(1 - beta_2^t) / (1 - beta_1^t). `learning_rate` defaults to 0.001;
    `beta_1=0.9`, `beta_2=0.999`, `epsilon=1e-7`, `amsgrad=False` (True: the running maximum of v in
    its place). Also the arguments every optimizer takes (see Optimizer): `weight_decay`,
    `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`, `name` (by default `"adam"`). Keras's
    positional order: `Adam(learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay,
    clipnorm, clipvalue, global_clipnorm)`."""
    names = ("adam",)
    source, kernel_name = "optimizers/adam.cl", "AdamUpdate"
    defaults = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7, "amsgrad": False}

    def __init__(self, learning_rate=None, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False,
                 weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0,
                 name=None, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, l1=l1, l2=l2, name=name, beta_1=beta_1,
                         beta_2=beta_2, epsilon=epsilon, amsgrad=amsgrad, **kwargs)

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
        return {"alpha": alpha, "beta1": h["beta_1"], "beta2": h["beta_2"], "eps": h["epsilon"]}


class AdamW(Adam):
    """Keras's `AdamW` (`"adamw"`): Adam with decoupled weight decay, w -= weight_decay · lr · w
    before each step. `learning_rate` defaults to 0.001; `weight_decay=0.004` as in Keras (None is
    refused); Adam's `beta_1`, `beta_2`, `epsilon`, `amsgrad` and the other arguments every
    optimizer takes (see Optimizer): `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`,
    `name` (by default `"adam_w"`, Keras's). Keras's positional order, the decay second:
    `AdamW(learning_rate, weight_decay, beta_1, beta_2, epsilon, amsgrad, clipnorm, clipvalue,
    global_clipnorm)`."""
    names = ("adamw",)

    def __init__(self, learning_rate=None, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, clipnorm=None, clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0,
                 name=None, **kwargs):
        if weight_decay is None:
            raise ValueError("AdamW weight_decay must be a non-negative number (Keras's default 0.004), got None")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay, clipnorm, clipvalue,
                         global_clipnorm, l1=l1, l2=l2, name=name, **kwargs)
