from .base import Optimizer


class AdaGrad(Optimizer):
    names = ("adagrad",)
    source, kernel_name = "optimizers/adagrad.cl", "AdaGradUpdate"
    defaults = {"initial_accumulator_value": 0.1, "epsilon": 1e-7}

    def slot_initials(self):
        return {"accumulator": self.hyper["initial_accumulator_value"]}

    def scalars(self, learning_rate):
        return (learning_rate, self.hyper["epsilon"])


Adagrad = AdaGrad  # Keras's spelling
