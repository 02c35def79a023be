from .base import Loss


class MeanSquaredError(Loss):
    """Keras's `MeanSquaredError` loss (`"mse"`, `"mean_squared_error"`): the mean over outputs of
    (p - t)², over the last axis and then the other axes and the batch (Keras's reduction). Targets
    have the output's shape. Takes no arguments (Keras's `reduction` and `name` are not taken)."""
    names = ("mse", "mean_squared_error")
    source, mode = "losses/regression.cl", 0


class MeanAbsoluteError(Loss):
    """Keras's `MeanAbsoluteError` loss (`"mae"`, `"mean_absolute_error"`): the mean over outputs of
    |p - t|, over the last axis and then the other axes and the batch (Keras's reduction). Targets
    have the output's shape. Takes no arguments (Keras's `reduction` and `name` are not taken)."""
    names = ("mae", "mean_absolute_error")
    source, mode = "losses/regression.cl", 1
