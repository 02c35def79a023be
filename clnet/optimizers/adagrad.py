from .base import Optimizer


class AdaGrad(Optimizer):
    """Keras's `Adagrad` (also `AdaGrad`, `"adagrad"`): accumulator += g², w -= lr · g /
    sqrt(accumulator + epsilon). `learning_rate` defaults to 0.001; `initial_accumulator_value=0.1`,
    the accumulator's start; `epsilon=1e-7`. Also the arguments every optimizer takes (see
    Optimizer): `weight_decay`, `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`, `name` (by
    default `"adagrad"`, Keras's). Keras's positional order: `Adagrad(learning_rate,
    initial_accumulator_value, epsilon, weight_decay, clipnorm, clipvalue, global_clipnorm)`."""
    names = ("adagrad",)
    source, kernel_name = "optimizers/adagrad.cl", "AdaGradUpdate"
    defaults = {"initial_accumulator_value": 0.1, "epsilon": 1e-7}
    name_prefix = "adagrad"  # (Keras's class is Adagrad)

    def __init__(self, learning_rate=None, initial_accumulator_value=0.1, epsilon=1e-7, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, *, l1=0.0, l2=0.0, name=None, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                         global_clipnorm=global_clipnorm, l1=l1, l2=l2, name=name,
                         initial_accumulator_value=initial_accumulator_value, epsilon=epsilon, **kwargs)

    def slot_initials(self):
        return {"accumulator": self.hyper["initial_accumulator_value"]}

    def scalars(self, learning_rate):
        return {"lr": learning_rate, "eps": self.hyper["epsilon"]}


Adagrad = AdaGrad  # Keras's spelling
