from .base import Optimizer


class AdaDelta(Optimizer):
    names = ("adadelta",)
    source, kernel_name = "optimizers/adadelta.cl", "AdaDeltaUpdate"
    defaults = {"rho": 0.95, "epsilon": 1e-7}

    def slot_initials(self):
        return {"mean_square_grad": 0.0, "mean_square_update": 0.0}


Adadelta = AdaDelta  # Keras's spelling
