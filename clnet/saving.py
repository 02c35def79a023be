"""Checkpoints: a model's config, weights, compile settings, optimizer state and epoch in one
HDF5 file (the layout is in docs/checkpoint-format.md).

Weights and optimizer moments are stored per parameter in Keras layout, never as the device's
flat buffers: those depend on the device's alignment, the float type and the layer's padding and panels,
so a checkpoint written on one device or floatx loads on any other.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
from pathlib import Path

import h5py
import numpy as np

from . import keras_archive, optimizers, system
from .cl.parameters import Parameter
from .cl.runtime import floatx_dtype
from .layers.base import register_custom_objects
from .model import Model, model_from_config
from ._version import __version__

FORMAT_VERSION = 1
# HDF5 1.8 structures: unlike the default (1.6-compatible) ones, their object headers, group
# links and superblock carry checksums, so a flipped bit in the metadata (and in the attributes,
# stored inline as fixed-length strings) fails to read instead of loading a different model.
_LIBVER = ("v108", "v108")
_TEMP_SUFFIX = ".tmp"


class CheckpointError(ValueError, OSError):
    """A checkpoint cannot be written or read; the message names the file and the problem.

    Both a ValueError (bad content) and an OSError (a file problem), so either `except` catches it.
    """


# -- writing ------------------------------------------------------------------------------------
def save_model(model: Model, path) -> None:
    """Everything `load_model` needs to resume training exactly."""
    if not model.compiled:
        raise ValueError(f"cannot save to {os.fspath(path)!r}: the model is not compiled, so there is no "
                         "optimizer state to resume from; compile it first, or use save_weights")
    _save(model, path, training=True)


def save_weights(model: Model, path) -> None:
    """The weights only, in the same per-layer groups as a full checkpoint."""
    _save(model, path, training=False)


def _save(model: Model, path, training: bool) -> None:
    path = Path(path)
    if not model.built:
        raise ValueError(f"cannot save to {str(path)!r}: the model is not built and has no weights yet; "
                         "call build(input_shape) or fit first")
    # Every device read happens before the file is created.
    layers = _layer_records(model)
    moments = _moment_records(model, layers) if training else {}
    scalars = model.optimizer.scalar_state() if training else {}  # (a LossScaleOptimizer's scale and counter)

    def write(f: h5py.File) -> None:
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["clnet_version"] = np.bytes_(__version__)
        f.attrs["model_config"] = _json(model.get_config())
        f.attrs["epoch"] = model.epoch
        f.attrs["data_epoch"] = model.data_epoch
        for group_name, layer, weights in layers:
            group = f.create_group(f"layers/{group_name}")
            group.attrs["type"] = np.bytes_(type(layer).__name__)
            group.attrs["weight_names"] = np.array([name for name, _, _ in weights], dtype="S")
            for name, _, array in weights:
                _write_dataset(group, name, array)
        if training:
            opt = model.optimizer
            f.attrs["training_config"] = _json({
                **model.compile_config(),
                "optimizer": {"class_name": type(opt).__name__, "config": opt.get_config()}})
            group = f.create_group("optimizer")
            group.attrs["iterations"] = opt.iterations
            for key, value in scalars.items():
                group.attrs[key] = value
            for key, array in moments.items():
                _write_dataset(group, key, array)

    _write_atomically(path, write)


def _layer_records(model: Model) -> list:
    """(group name, layer, [(weight name, parameter, Keras-layout array)]) for every layer."""
    records = []
    for index, layer in enumerate(model.built_layers):
        weights = layer.get_weights()
        if len(weights) != len(layer.parameters):
            raise NotImplementedError(f"layer {layer.name!r} returns {len(weights)} weight arrays for "
                                      f"{len(layer.parameters)} parameters; checkpoints need one per parameter")
        group = f"{index:03d}_{layer.name.replace('/', '_')}"  # '/' would nest HDF5 groups
        records.append((group, layer, list(zip(_weight_names(layer), layer.parameters, weights))))
    return records


def _weight_names(layer) -> list[str]:
    """The attribute each parameter is kept in (Dense: kernel, bias), else weight_<i>."""
    attributes = {id(value): name for name, value in vars(layer).items() if isinstance(value, Parameter)}
    return [attributes.get(id(p), f"weight_{i}") for i, p in enumerate(layer.parameters)]


def _moment_records(model: Model, layers: list) -> dict[str, np.ndarray]:
    """'<slot>/<layer group>/<weight>' -> that parameter's slice of the flat moment, in Keras layout."""
    for _, layer, weights in layers:
        for name, parameter, array in weights:
            # Moments are unpadded like the weights; that is only right if the weights are too.
            if not np.array_equal(parameter.to_keras(parameter.value.numpy()), array, equal_nan=True):
                raise NotImplementedError(
                    f"layer {layer.name!r} ({type(layer).__name__}) returns weight {name!r} from get_weights() "
                    "in another layout than its parameter's keras_index says; its optimizer state cannot "
                    "be saved portably")
    records = {}
    for slot, tensor in model.optimizer.moments.items():
        flat = tensor.numpy()
        for group, _, weights in layers:
            for name, parameter, array in weights:
                if model.optimizer.keeps(parameter):  # none for the others (non-trainable, frozen)
                    records[f"{slot}/{group}/{name}"] = parameter.to_keras(model.optimizer.moment(parameter, flat))
    return records


def _json(value) -> np.bytes_:
    # ASCII-escaped JSON in a fixed-length string: stored inline in the checksummed object header
    # (a variable-length string would live in the unchecksummed global heap).
    return np.bytes_(json.dumps(value).encode("ascii"))


def _write_dataset(group: h5py.Group, name: str, array: np.ndarray) -> None:
    dataset = group.create_dataset(name, data=array)
    dataset.attrs["sha256"] = np.bytes_(_sha256(array))


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _write_atomically(path: Path, write) -> None:
    """Write a temp file beside `path`, fsync it, rename it over `path`, fsync the directory: a crash
    at any point leaves either the old checkpoint or the new one under the real name."""
    directory = path.parent
    _remove_stale_temps(path)
    # The host and pid in the name let a later save tell a dead writer's leftover from a live one.
    temp = directory / f".{path.name}.{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}{_TEMP_SUFFIX}"
    try:
        with h5py.File(temp, "x", libver=_LIBVER) as f:
            write(f)
        system.fsync_file(temp)
        system.replace(temp, path)
    except BaseException as error:  # including KeyboardInterrupt: never leave our temp file behind
        temp.unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, CheckpointError):
            raise CheckpointError(f"cannot write checkpoint {str(path)!r}: {error}") from error
        raise
    system.fsync_directory(directory)


def _remove_stale_temps(path: Path) -> None:
    """Delete temp files that a killed save of `path` on this host left (their writer is gone)."""
    prefix = f".{path.name}.{socket.gethostname()}-"
    try:
        entries = os.listdir(path.parent)
    except OSError:
        return  # the write that follows reports the missing or unreadable directory
    for entry in entries:
        if not (entry.startswith(prefix) and entry.endswith(_TEMP_SUFFIX)):
            continue
        pid = entry[len(prefix):].split("-")[0]
        if pid.isdigit() and not system.process_alive(int(pid)):
            (path.parent / entry).unlink(missing_ok=True)


# -- reading ------------------------------------------------------------------------------------
def load_model(path, floatx: str | None = None, custom_objects: dict | None = None, compile: bool = True) -> Model:
    """The model saved by `model.save(path)`, compiled, with its optimizer state and epoch, ready to
    `fit(..., initial_epoch=model.epoch)` or `predict`. `floatx` overrides the saved float type.
    As Keras's: `custom_objects`, {name: class}, for layer classes of your own that a file names
    (a subclass with call() is saved as the layers it is made of, and needs none: it may be
    given, and is not used); `compile=False` gives the model with its weights and epoch, not
    compiled (the optimizer state is not read)."""
    floatx_dtype(floatx)  # a bad argument is the caller's error, not the file's
    register_custom_objects(custom_objects)
    if Path(path).is_file() and keras_archive.is_archive(path):  # Keras 3's .keras (a zip), not HDF5
        return keras_archive.load(path, floatx, compile)
    with _Checkpoint(path) as checkpoint:
        if not compile:
            model = checkpoint.build_model(floatx)
            checkpoint.set_weights(model)
            checkpoint.set_epochs(model)
            return model
        training = checkpoint.json("training_config", missing=(
            "it holds weights only (written by save_weights); build the model and call load_weights"))
        model = checkpoint.build_model(floatx)
        try:
            optimizer = _optimizer(training["optimizer"])
            model.compile(optimizer, training["loss"], training["metrics"], loss_weights=training.get("loss_weights"),
                          weighted_metrics=training.get("weighted_metrics"))
        except (KeyError, TypeError, ValueError) as error:
            raise checkpoint.error(f"its training_config {training!r} is not valid: {error}") from error
        layers = checkpoint.set_weights(model)
        optimizer.iterations = checkpoint.int_attr(checkpoint.file["optimizer"], "iterations")
        checkpoint.set_moments(model, layers)
        checkpoint.set_scalar_state(optimizer)
        checkpoint.set_epochs(model)
    return model


def load_weights(model: Model, path) -> None:
    """Set `model`'s weights from a file of save_weights or save; its layers must match the file's."""
    with _Checkpoint(path) as checkpoint:
        if not model.built:
            model.build(checkpoint.json("model_config")["input_shape"])
        checkpoint.set_weights(model)


def _optimizer(entry: dict) -> optimizers.Optimizer:
    classes = optimizers.Optimizer.classes
    if entry["class_name"] not in classes:
        raise ValueError(f"unknown optimizer class {entry['class_name']!r}; expected one of {sorted(classes)}")
    return classes[entry["class_name"]].from_config(dict(entry["config"]))  # (its name too, as Keras's)


class _Checkpoint:
    """An open checkpoint whose every problem is raised as a CheckpointError naming the file."""

    def __init__(self, path):
        self.path = Path(path)
        self.name = str(self.path)
        if not self.path.exists():
            raise self.error("no such file")
        if not self.path.is_file():
            raise self.error("is not a file")
        try:
            is_hdf5 = h5py.is_hdf5(self.path)
        except OSError as error:
            raise self.error(f"cannot be read: {error}") from error
        if not is_hdf5:
            raise self.error("is not an HDF5 file; expected a checkpoint written by model.save or save_weights")
        try:
            self.file = h5py.File(self.path, "r")
        except OSError as error:
            raise self.error(f"is damaged or truncated, HDF5 cannot open it: {error}") from error

    def __enter__(self) -> "_Checkpoint":
        try:
            version = self.int_attr(self.file, "format_version", missing=(
                "it is an HDF5 file but not a clnet checkpoint (no format_version attribute)"))
            if version > FORMAT_VERSION:
                writer = _text(self.attr(self.file, "clnet_version"))
                raise self.error(f"it has checkpoint format {version} (written by clnet {writer}), but this "
                                 f"clnet reads format {FORMAT_VERSION} at most; upgrade clnet")
        except BaseException as error:
            self.__exit__(type(error), error, None)
            raise
        return self

    def __exit__(self, kind, error, traceback):
        self.file.close()
        # h5py and numpy errors from reading a damaged file; CheckpointError is a ValueError too.
        if isinstance(error, (OSError, KeyError, ValueError, TypeError)) and not isinstance(error, CheckpointError):
            raise self.error(f"is damaged or not a valid checkpoint: {type(error).__name__}: {error}") from error

    def error(self, problem: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {self.name!r}: {problem}")

    # -- attributes --------------------------------------------------------------------------
    def attr(self, obj, key: str, missing: str | None = None):
        if key not in obj.attrs:
            raise self.error(missing or f"{obj.name} has no attribute {key!r}")
        return obj.attrs[key]

    def set_epochs(self, model: Model) -> None:
        """The model's epoch count and the data order its next epoch takes (Trainer.fit); a file
        written before clnet kept the order continues from the epoch count."""
        model.epoch = self.int_attr(self.file, "epoch")
        has_order = "data_epoch" in self.file.attrs
        model.data_epoch = self.int_attr(self.file, "data_epoch") if has_order else model.epoch

    def int_attr(self, obj, key: str, missing: str | None = None) -> int:
        value = self.attr(obj, key, missing)
        if not (np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.integer) and value >= 0):
            raise self.error(f"attribute {key!r} of {obj.name} must be a non-negative integer, got {value!r}")
        return int(value)

    def json(self, key: str, missing: str | None = None):
        text = self.attr(self.file, key, missing)
        try:
            return json.loads(_text(text))
        except ValueError as error:
            raise self.error(f"attribute {key!r} is not valid JSON: {error}") from error

    # -- model, weights, moments -------------------------------------------------------------
    def build_model(self, floatx) -> Model:
        config = self.json("model_config")
        try:
            return model_from_config(config, floatx=floatx)
        except (KeyError, TypeError, ValueError) as error:
            raise self.error(f"its model_config does not describe a model clnet can build: "
                             f"{type(error).__name__}: {error}") from error

    def array(self, key: str, shape: tuple) -> np.ndarray:
        """The dataset at `key`, checked against its checksum and the shape the model expects."""
        if key not in self.file:
            raise self.error(f"dataset {key!r} is missing")
        dataset = self.file[key]
        if not isinstance(dataset, h5py.Dataset):
            raise self.error(f"{key!r} is a group, expected a dataset")
        if dataset.shape != tuple(shape):
            raise self.error(f"dataset {key!r} has shape {dataset.shape}, but the model expects {tuple(shape)}")
        array = dataset[()]
        expected = _text(self.attr(dataset, "sha256"))
        if _sha256(array) != expected:
            raise self.error(f"dataset {key!r} fails its SHA-256 check (stored {expected}, read "
                             f"{_sha256(array)}): the file is corrupt")
        return array

    def layer_groups(self, model: Model) -> list[str]:
        """The file's layer groups in order, checked against the model's layers."""
        if "layers" not in self.file:
            raise self.error("it has no 'layers' group")
        groups = sorted(self.file["layers"], key=lambda g: int(g.split("_")[0]))  # by the index prefix
        if len(groups) != len(model.built_layers):
            raise self.error(f"it holds {len(groups)} layers ({', '.join(groups)}), but the model has "
                             f"{len(model.built_layers)} ({', '.join(l.name for l in model.built_layers)})")
        for group, layer in zip(groups, model.built_layers):
            saved = _text(self.attr(self.file["layers"][group], "type"))
            if saved != type(layer).__name__:
                raise self.error(f"layer group {group!r} holds a {saved} layer, but the model's layer "
                                 f"{layer.name!r} is a {type(layer).__name__}")
        return groups

    def set_weights(self, model: Model) -> list:
        """Read every weight and check its checksum and shape before setting any, so a file that
        does not fit the model changes nothing. Returns (group, layer, [(weight name, parameter, Keras shape)]) for set_moments."""
        groups = self.layer_groups(model)
        layers, arrays = [], []
        for group, layer in zip(groups, model.built_layers):
            names = [_text(n) for n in self.attr(self.file["layers"][group], "weight_names")]
            shapes = [w.shape for w in layer.get_weights()]
            if len(names) != len(shapes):
                raise self.error(f"layer group {group!r} holds {len(names)} weights {names}, but the model's "
                                 f"layer {layer.name!r} has {len(shapes)}")
            arrays.append([self.array(f"layers/{group}/{n}", s) for n, s in zip(names, shapes)])
            layers.append((group, layer, list(zip(names, layer.parameters, shapes))))
        for (group, layer, _), weights in zip(layers, arrays):
            try:
                layer.set_weights(weights)
            except ValueError as error:  # the layer's own checks, e.g. NaN weights
                raise self.error(f"layer group {group!r}: {error}") from error
        return layers

    def set_moments(self, model: Model, layers: list) -> None:
        """Scatter each slot's per-parameter arrays into this store's flat layout. Padding keeps the
        slot's initial value: what it holds in an uninterrupted run, where its gradient is always 0."""
        optimizer = model.optimizer
        for slot, tensor in optimizer.moments.items():
            flat = np.full(tensor.size, optimizer.slots[slot], tensor.dtype)
            for group, _, weights in layers:
                for name, parameter, shape in weights:
                    if not optimizer.keeps(parameter):
                        continue
                    saved = self.array(f"optimizer/{slot}/{group}/{name}", shape)
                    parameter.from_keras(saved, optimizer.moment(parameter, flat))
            tensor.write(flat)

    def set_scalar_state(self, optimizer) -> None:
        """The optimizer's state besides moments and iterations (Optimizer.scalar_state: a
        LossScaleOptimizer's scale and counter), from the attributes of the optimizer group."""
        group = self.file["optimizer"]
        values = {key: self.attr(group, key) for key in optimizer.scalar_state()}
        try:
            optimizer.set_scalar_state(values)
        except (TypeError, ValueError) as error:
            raise self.error(f"the state of its optimizer group is not valid: {error}") from error


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
