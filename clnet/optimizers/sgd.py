from .base import Optimizer


class SGD(Optimizer):
    """Keras's `SGD` (`"sgd"`): plain, w -= lr · g, or with momentum, v = momentum · v - lr · g then
    w += v (and with `nesterov`, w += momentum · v - lr · g, which without momentum changes
    nothing). `learning_rate` defaults to 0.01, as Keras's; `momentum=0.0` in [0, 1];
    `nesterov=False`. Also the arguments every optimizer takes (see Optimizer): `weight_decay`,
    `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`, `name` (by default `"sgd"`). Keras's
    positional order: `SGD(learning_rate, momentum, nesterov, weight_decay, clipnorm, clipvalue,
    global_clipnorm)`. A velocity buffer is kept only with momentum."""
    names = ("sgd",)
    source, kernel_name = "optimizers/sgd.cl", "SGDUpdate"
    defaults = {"momentum": 0.0, "nesterov": False}
    learning_rate_default = 0.01

    def __init__(self, learning_rate=None, momentum=0.0, nesterov=False, weight_decay=None, clipnorm=None,
                 clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0, name=None, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, l1=l1, l2=l2, name=name, momentum=momentum,
                         nesterov=nesterov, **kwargs)

    def check(self):
        if self.hyper["momentum"] > 1:
            raise ValueError(f"{type(self).__name__} momentum must be in [0, 1], got {self.hyper['momentum']!r}")

    def slot_initials(self):
        return {"velocity": 0.0} if self.hyper["momentum"] else {}

    def defines(self):
        return {"MOMENTUM": int(self.hyper["momentum"] != 0)}

    def scalars(self, learning_rate):
        if not self.hyper["momentum"]:
            return {"lr": learning_rate}
        return {"lr": learning_rate, "momentum": self.hyper["momentum"], "nesterov": int(self.hyper["nesterov"])}


class Momentum(SGD):
    """SGD with momentum 0.9 by default (`"momentum"`, clnet's name from the MQL5 book; Keras writes
    `SGD(momentum=...)`). `learning_rate` defaults to 0.01; `momentum=0.9` in [0, 1];
    `nesterov=False`; and the arguments every optimizer takes (see Optimizer): `weight_decay`,
    `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`, `name` (by default `"momentum"`), in
    SGD's positional order."""
    names = ("momentum",)
    defaults = {"momentum": 0.9, "nesterov": False}

    def __init__(self, learning_rate=None, momentum=0.9, nesterov=False, weight_decay=None, clipnorm=None,
                 clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0, name=None, **kwargs):
        super().__init__(learning_rate, momentum, nesterov, weight_decay, clipnorm, clipvalue,
                         global_clipnorm, l1=l1, l2=l2, name=name, **kwargs)
