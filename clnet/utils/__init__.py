"""Utilities of keras.utils, with Keras 3's names, arguments and defaults.

to_categorical (one-hot labels), pad_sequences (ragged sequences to one array),
set_random_seed (seed Python, numpy and clnet at once), timeseries_dataset_from_array
(sliding windows over a series, as a clnet PyDataset, without TensorFlow) and clear_session
(the automatic layer names start again: dense, dense_1, ...; the global dtype policy is unset).
"""
from ..data import PyDataset
from .files import get_file
from .numerical import to_categorical
from .plotting import model_to_dot, plot_model
from .seeding import set_random_seed
from .session import clear_session
from .sequences import pad_sequences
from .timeseries import TimeseriesDataset, timeseries_dataset_from_array

__all__ = ["clear_session", "to_categorical", "pad_sequences", "set_random_seed", "timeseries_dataset_from_array",
           "TimeseriesDataset", "PyDataset", "plot_model", "model_to_dot",
           "get_file"]
