from .base import Optimizer


class RMSProp(Optimizer):
    """Keras's `RMSprop` (also `RMSProp`, `"rmsprop"`): s = rho · s + (1 - rho) · g², step = lr · g
    / sqrt(s + epsilon), with `centered` the root of s - a² + epsilon, a the mean gradient, and with
    `momentum` a momentum buffer over the steps. `learning_rate` defaults to 0.001; `rho=0.9`,
    `momentum=0.0`, `epsilon=1e-7`, `centered=False`. Also the arguments every optimizer takes (see
    Optimizer): `weight_decay`, `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`, `name` (by
    default `"rm_sprop"`, Keras's automatic name for RMSprop). Keras's positional order:
    `RMSprop(learning_rate, rho, momentum, epsilon, centered, weight_decay, clipnorm, clipvalue,
    global_clipnorm)`."""
    names = ("rmsprop",)
    source, kernel_name = "optimizers/rmsprop.cl", "RMSPropUpdate"
    defaults = {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-7, "centered": False}
    name_prefix = "rm_sprop"  # (Keras's class RMSprop in snake_case)

    def __init__(self, learning_rate=None, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0,
                 name=None, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, l1=l1, l2=l2, name=name, rho=rho, momentum=momentum,
                         epsilon=epsilon, centered=centered, **kwargs)

    slot_arguments = {"momentum": "momentum_buffer"}  # (the kernel's momentum is the coefficient)

    def slot_initials(self):
        slots = {"mean_square": 0.0}
        if self.hyper["centered"]:
            slots["mean_grad"] = 0.0
        if self.hyper["momentum"] > 0:
            slots["momentum"] = 0.0
        return slots

    def defines(self):
        return {"CENTERED": int(self.hyper["centered"]), "MOMENTUM": int(self.hyper["momentum"] > 0)}

    def scalars(self, learning_rate):
        h = self.hyper
        return {"lr": learning_rate, "rho": h["rho"], "eps": h["epsilon"],
                **({"momentum": h["momentum"]} if h["momentum"] > 0 else {})}


RMSprop = RMSProp  # Keras's spelling
