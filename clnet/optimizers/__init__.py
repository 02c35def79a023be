"""Optimizers: one file each, its update kernel in the .cl file beside it."""
from .base import Optimizer, get
from .sgd import SGD
from .momentum import Momentum
from .adagrad import AdaGrad
from .rmsprop import RMSProp
from .adadelta import AdaDelta
from .adam import Adam

__all__ = ["Optimizer", "get", "SGD", "Momentum", "AdaGrad", "RMSProp", "AdaDelta", "Adam"]
