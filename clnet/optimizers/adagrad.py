from .base import Optimizer


class AdaGrad(Optimizer):
    """Keras's `Adagrad` (also `AdaGrad`, `"adagrad"`): accumulator += g², w -= lr · g /
    sqrt(accumulator + epsilon). `learning_rate` defaults to 0.001; `initial_accumulator_value=0.1`,
    the accumulator's start; `epsilon=1e-7`. Also the arguments every optimizer takes (see
    Optimizer): `weight_decay`, `clipnorm`, `clipvalue`, `global_clipnorm`, `l1`, `l2`."""
    names = ("adagrad",)
    source, kernel_name = "optimizers/adagrad.cl", "AdaGradUpdate"
    defaults = {"initial_accumulator_value": 0.1, "epsilon": 1e-7}

    def slot_initials(self):
        return {"accumulator": self.hyper["initial_accumulator_value"]}

    def scalars(self, learning_rate):
        return (learning_rate, self.hyper["epsilon"])


Adagrad = AdaGrad  # Keras's spelling
