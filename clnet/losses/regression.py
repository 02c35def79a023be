from .base import Loss


class MeanSquaredError(Loss):
    """mean over outputs of (p - t)^2."""
    names = ("mse", "mean_squared_error")
    source, mode = "losses/regression.cl", 0


class MeanAbsoluteError(Loss):
    """mean over outputs of |p - t|."""
    names = ("mae", "mean_absolute_error")
    source, mode = "losses/regression.cl", 1
