"""Keras's `keras.models` namespace: the model classes and their loading, under the names Keras
scripts import them by (`keras.models.load_model(...)`)."""
from .model import Model, Sequential, model_from_config
from .saving import load_model

__all__ = ["Model", "Sequential", "load_model", "model_from_config"]
