from .base import Optimizer


class AdaDelta(Optimizer):
    """Keras's `Adadelta` (also `AdaDelta`, `"adadelta"`): Eg = rho · Eg + (1 - rho) · g², dx =
    -sqrt(Ex + epsilon) · g / sqrt(Eg + epsilon), Ex = rho · Ex + (1 - rho) · dx², w += lr · dx.
    `learning_rate` defaults to 0.001, as Keras's (Zeiler's method is 1.0); `rho=0.95`,
    `epsilon=1e-7`. Also the arguments every optimizer takes (see Optimizer): `weight_decay`,
    `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`, `name` (by default `"adadelta"`,
    Keras's). Keras's positional order: `Adadelta(learning_rate, rho, epsilon, weight_decay,
    clipnorm, clipvalue, global_clipnorm)`."""
    names = ("adadelta",)
    source, kernel_name = "optimizers/adadelta.cl", "AdaDeltaUpdate"
    defaults = {"rho": 0.95, "epsilon": 1e-7}
    name_prefix = "adadelta"  # (Keras's class is Adadelta)

    def __init__(self, learning_rate=None, rho=0.95, epsilon=1e-7, weight_decay=None, clipnorm=None,
                 clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0, name=None, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, l1=l1, l2=l2, name=name, rho=rho, epsilon=epsilon,
                         **kwargs)

    def slot_initials(self):
        return {"mean_square_grad": 0.0, "mean_square_update": 0.0}


Adadelta = AdaDelta  # Keras's spelling
