"""Optimizers: one file each, its update kernel in the .cl file beside it; schedules for the
learning rate in clnet.optimizers.schedules; Keras's dynamic loss scaling around any of them in
LossScaleOptimizer."""
from . import schedules
from .base import Optimizer, get
from .sgd import SGD, Momentum
from .adagrad import AdaGrad, Adagrad
from .rmsprop import RMSProp, RMSprop
from .adadelta import AdaDelta, Adadelta
from .adam import Adam, AdamW
from .loss_scale_optimizer import LossScaleOptimizer

__all__ = ["Optimizer", "get", "schedules", "SGD", "Momentum", "AdaGrad", "Adagrad", "RMSProp", "RMSprop",
           "AdaDelta", "Adadelta", "Adam", "AdamW", "LossScaleOptimizer"]
