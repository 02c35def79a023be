"""Keras 3's `.keras` archive: a zip of config.json (the model's Keras config), model.weights.h5
(each layer's variables) and metadata.json. `load` builds a clnet model from one that Keras
wrote; `save` writes one that Keras 3 loads (`keras.models.load_model`) and predicts with as
clnet does. clnet's own checkpoint (`.h5`: optimizer state, exact resume) is saving.py's.

Keras's config of a layer names its constructor's arguments, which clnet's layers take by the
same names; what Keras has and clnet does not (regularizers, constraints, data_format, ...) is
taken only at Keras's default, else the error names the layer, the argument and its value.
Initializers are kept by name (the weights come from the archive). In model.weights.h5 a
layer's variables are at layers/<name>/vars/<i>, where <name> is not the layer's name but its
class's in snake_case, numbered in the model's order of layers (dense, dense_1, ...); a
recurrent layer's are under cell/, a Bidirectional's under forward_layer/ and backward_layer/,
a TimeDistributed's under layer/, a MultiHeadAttention's under query_dense/, key_dense/,
value_dense/ and output_dense/."""
from __future__ import annotations

import datetime
import inspect
import io
import json
import zipfile
from collections import defaultdict
from pathlib import Path

import h5py
import numpy as np

from . import activations, layers as layers_module, optimizers
from .cache import write_atomically
from .dtype_policies import SIXTEEN_BITS, floatx_of, policy_of
from .layers.base import PROBE_LENGTHS, Layer, reserve_names, snake_case
from .model import Model, Sequential

MAGIC = b"PK\x03\x04"  # a zip file's first bytes

# Keras config keys clnet's layers do not take, with the value (or values) they must hold: Keras's
# defaults, which clnet computes as.
KERAS_ONLY = {
    "data_format": ("channels_last", None), "groups": (1,), "sparse": (False,),
    "ragged": (False,), "optional": (False,), "batch_size": (None,), "input_tensor": (None,),
    "kernel_regularizer": (None,), "bias_regularizer": (None,), "activity_regularizer": (None,),
    "recurrent_regularizer": (None,), "embeddings_regularizer": (None,), "beta_regularizer": (None,),
    "gamma_regularizer": (None,), "kernel_constraint": (None,), "bias_constraint": (None,),
    "recurrent_constraint": (None,), "embeddings_constraint": (None,), "beta_constraint": (None,),
    "gamma_constraint": (None,), "lora_rank": (None,), "lora_alpha": (None,), "quantization_config": (None,),
    "synchronized": (False,), "rms_scaling": (False,), "stateful": (False,), "unroll": (False,),
    "use_cudnn": ("auto", True, False), "zero_output_for_mask": (True, False), "implementation": (1, 2),
    "use_gate": (False,), "sliding_window": (None,), "attention_axes": (None, [1], (1,)), "input_length": (None,),
    "seed": (None,), "flash_attention": (None, False), "renorm": (False,),
    "renorm_clipping": (None,), "renorm_momentum": (0.99,), "adjustment": (None,), "virtual_batch_size": (None,),
}
# An activation's Keras name and clnet's, where they differ.
ACTIVATION_NAMES = {"silu": "swish"}
# clnet's activations Keras writes by name: clnet's config without its parameters' defaults.
KERAS_ACTIVATIONS = {"linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "swish", "softplus", "elu"}
# The Keras layer classes clnet reads and writes (by the same names and arguments).
KERAS_LAYERS = {
    "Dense", "Conv1D", "Conv2D", "MaxPooling1D", "MaxPooling2D", "AveragePooling1D", "AveragePooling2D",
    "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D",
    "BatchNormalization", "LayerNormalization", "Dropout", "Flatten", "Reshape", "Activation", "ReLU", "LeakyReLU",
    "ELU", "Softmax", "Embedding", "SimpleRNN", "LSTM", "GRU", "Bidirectional", "MultiHeadAttention", "Add",
    "Multiply", "Concatenate", "Subtract", "Average", "Maximum", "Minimum", "RepeatVector", "Permute",
    "ZeroPadding2D", "TimeDistributed", "PReLU", "GaussianNoise", "SpatialDropout1D", "SpatialDropout2D",
    "SpatialDropout3D", "Cropping1D", "Cropping2D", "UpSampling1D", "UpSampling2D", "Masking"}
RECURRENT = ("SimpleRNN", "LSTM", "GRU")
ATTENTION_PARTS = ("query_dense", "key_dense", "value_dense", "output_dense")
# Keras's optimizer classes that clnet has, and the config keys Keras has and clnet does not.
KERAS_OPTIMIZERS = {"RMSProp": "RMSprop", "AdaGrad": "Adagrad", "AdaDelta": "Adadelta", "Momentum": "SGD"}
OPTIMIZER_KERAS_ONLY = {"use_ema": (False,), "ema_momentum": None, "ema_overwrite_frequency": None,
                        "loss_scale_factor": (None,), "gradient_accumulation_steps": (None,)}


class ArchiveError(ValueError, OSError):
    """A .keras archive cannot be read or written; the message names the file and the problem."""


# -- reading -------------------------------------------------------------------------------------
def is_archive(path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == MAGIC


def load(path, floatx: str | None = None, compile: bool = True) -> Model:
    """The model of a Keras 3 `.keras` archive, its weights set, compiled with the archive's
    compile config (optimizer, loss, metrics) unless `compile=False`. A layer clnet does not have,
    an argument it does not take, a missing or corrupt part: an ArchiveError naming it, and no
    model."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            for part in ("config.json", "model.weights.h5"):
                if part not in names:
                    raise ArchiveError(f"{str(path)!r} is not a Keras archive: it has no {part} "
                                       f"(it holds {sorted(names)})")
            config = json.loads(archive.read("config.json"))
            weights = archive.read("model.weights.h5")
    except zipfile.BadZipFile as error:
        raise ArchiveError(f"{str(path)!r} is not a readable Keras archive: {error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ArchiveError(f"{str(path)!r}: its config.json is not JSON: {error}") from None
    try:
        store = h5py.File(io.BytesIO(weights), "r")
    except OSError as error:
        raise ArchiveError(f"{str(path)!r}: its model.weights.h5 is not an HDF5 file: {error}") from None
    try:
        with store:
            model, entries = _model_from_keras(config, floatx)
            if config.get("config", {}).get("dtype") is not None:  # (Keras's model.dtype_policy, which compile reads)
                model.dtype_policy = policy_of(config["config"]["dtype"])
            if not model.built:  # Inputs of lengths None: the weights do not depend on the lengths
                inputs = model.inputs if isinstance(model.inputs, list) else [model.inputs]
                shapes = [tuple(PROBE_LENGTHS[0] if n is None else n for n in i.shape[1:]) for i in inputs]
                model.build(shapes if len(shapes) > 1 else shapes[0])
            _set_weights(model, entries, store)
        if compile and config.get("compile_config"):
            _compile_from_keras(model, config["compile_config"])
    except (ValueError, TypeError, KeyError) as error:
        raise ArchiveError(f"{str(path)!r}: {error}") from None
    return model


def _model_from_keras(config: dict, floatx: str | None) -> tuple[Model, list]:
    """The clnet model of a Keras model config, and per layer (its Keras entry, the clnet layer)
    in the order whose classes number the weights' groups."""
    kind = config.get("class_name")
    inner = config.get("config", {})
    # The model's float type: its own policy (a Sequential's), else its layers' (Keras writes one
    # per layer; a model of float64 layers computes in float64).
    policies = [inner.get("dtype"), *(e["config"].get("dtype") for e in inner.get("layers", [])
                                      if e["class_name"] != "InputLayer")]
    floatx = floatx or next((f for f in map(_floatx, policies) if f), "float32")
    entries = [e for e in inner.get("layers", []) if e["class_name"] != "InputLayer"]
    reserve_names(e.get("name") or e["config"].get("name") for e in inner.get("layers", []))
    if kind == "Sequential":
        first = inner["layers"][0] if inner.get("layers") else {}
        if first.get("class_name") == "InputLayer":
            stack = [_input(first["config"], floatx)]
        elif inner.get("build_input_shape"):
            stack = [layers_module.Input(tuple(inner["build_input_shape"][1:]))]
        else:
            raise ValueError("its Sequential model has no input shape (an InputLayer or build_input_shape)")
        made = [_layer_from_keras(e) for e in entries]
        floatx = floatx if floatx in ("float32", "float64") else "float32"
        model = Sequential([*stack, *made], name=inner.get("name"), floatx=floatx)
        return model, list(zip(entries, made))
    if kind in ("Functional", "Model"):
        return _functional(inner, floatx)
    raise ValueError(f"its model is a {kind!r}; clnet reads Keras's Sequential and functional models "
                     "(a subclassed model's archive holds no graph to build)")


def _functional(inner: dict, floatx: str) -> tuple[Model, list]:
    tensors, made, entries = {}, {}, []
    computed = _mask_ops(inner["layers"])
    for entry in inner["layers"]:
        name = entry.get("name") or entry["config"]["name"]
        if entry["class_name"] == "InputLayer":
            tensors[name, 0] = [_input(entry["config"], floatx)]
            continue
        if name in computed:
            continue
        layer = made[name] = _layer_from_keras(entry)
        entries.append((entry, layer))
        for k, node in enumerate(entry.get("inbound_nodes", [])):
            args = _tensors(node.get("args", []), tensors)
            # training: Keras records the mode its layers were traced in (False beside a mask),
            # which the model's mode decides in clnet; masks its layers make again (_mask_ops).
            kwargs = {key: _tensors(value, tensors) for key, value in node.get("kwargs", {}).items()
                      if key != "training" and not (key == "mask" and (value is None or _names_in(value) <= computed))}
            result = layer(*args, **kwargs)
            tensors[name, k] = list(result) if isinstance(result, (list, tuple)) else [result]
    pick = lambda ref: tensors[ref[0], ref[1]][ref[2]]
    inputs, outputs = inner["input_layers"], inner["output_layers"]
    inputs = [pick(inputs)] if isinstance(inputs[0], str) else [pick(r) for r in inputs]
    if isinstance(outputs, dict):
        outputs = {key: pick(ref) for key, ref in outputs.items()}
    else:
        outputs = pick(outputs) if isinstance(outputs[0], str) else [pick(r) for r in outputs]
    model = Model(inputs if len(inputs) > 1 else inputs[0], outputs, name=inner.get("name"),
                  floatx=floatx if floatx in ("float32", "float64") else "float32")
    return model, entries


def _mask_ops(entries: list[dict]) -> set[str]:
    """The ops of a Keras functional config that only make masks (Embedding's NotEqual, Masking's
    NotEqual and Any, which Keras records where a layer passes a mask to the next): clnet's layers
    make and pass those masks themselves, so they and the mask arguments naming them are left out."""
    readers: dict[str, list[tuple[str, bool]]] = {}  # op -> (reader, whether as a mask argument)
    for entry in entries:
        reader = entry.get("name") or entry["config"]["name"]
        for node in entry.get("inbound_nodes", []):
            for key, value in [("", node.get("args", [])), *node.get("kwargs", {}).items()]:
                for name in _names_in(value):
                    readers.setdefault(name, []).append((reader, key == "mask"))
    ops = {e.get("name") or e["config"]["name"] for e in entries
           if e["class_name"] not in KERAS_LAYERS and e["class_name"] != "InputLayer"}
    found: set[str] = set()
    while True:  # an op read only as a mask, or only by such ops (Masking's NotEqual, read by Any)
        more = {op for op in ops - found if readers.get(op)
                and all(as_mask or reader in found for reader, as_mask in readers[op])}
        if not more:
            return found
        found |= more


def _names_in(value) -> set[str]:
    """The layers whose outputs a node argument names."""
    if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
        return {value["config"]["keras_history"][0]}
    if isinstance(value, (list, tuple)):
        return set().union(*(_names_in(v) for v in value))
    return set()


def _tensors(value, tensors: dict):
    """A node's arguments with each __keras_tensor__ replaced by the clnet tensor it names."""
    if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
        name, node, index = value["config"]["keras_history"]
        if (name, node) not in tensors:
            raise ValueError(f"a layer reads the output of {name!r} (call {node}), which comes later or not at all")
        return tensors[name, node][index]
    if isinstance(value, (list, tuple)):
        return [_tensors(v, tensors) for v in value]
    return value


def _floatx(dtype) -> str | None:
    """The float type clnet computes a Keras dtype policy in (a name or its serialized dict): its
    variables' type, float32 for the mixed and 16-bit policies (see clnet/dtype_policies.py)."""
    return None if dtype is None else floatx_of(policy_of(dtype))


def _input(config: dict, floatx: str):
    shape = config.get("batch_shape") or [None, *config["shape"]]
    dtype = config.get("dtype")
    integer = isinstance(dtype, str) and ("int" in dtype or dtype == "bool")
    return layers_module.Input(tuple(shape[1:]), name=config.get("name"), dtype=dtype if integer else None)


def _layer_from_keras(entry: dict) -> Layer:
    cls_name, config = entry["class_name"], dict(entry["config"])
    name = config.get("name", cls_name)
    cls = _clnet_class(cls_name, name)
    if cls_name in ("Bidirectional", "TimeDistributed"):
        config["layer"] = _layer_from_keras(config["layer"])
        if config.get("backward_layer"):
            config["backward_layer"] = _layer_from_keras(config["backward_layer"])
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {}
    for key, value in config.items():
        if key in ("activation", "recurrent_activation") and key in accepted:
            kwargs[key] = _activation_from_keras(value, name)
        elif key.endswith("_initializer") and key in accepted:
            initializer = _initializer_from_keras(value)
            if initializer is not None:  # (else the layer's default: the weights come from the archive)
                kwargs[key] = initializer
        elif key == "dtype":
            policy = policy_of(value)  # a policy clnet takes, or an error naming it
            if policy.compute_dtype in SIXTEEN_BITS:  # (the others are the model's float type)
                kwargs["dtype"] = policy
        elif key == "trainable":
            kwargs[key] = bool(value)  # (every layer class takes it, see Layer.__init_subclass__)
        elif key == "name" and key not in accepted:
            continue  # TimeDistributed: clnet gives the wrapped layer itself
        elif key == "axis" and isinstance(value, list) and len(value) == 1:
            kwargs[key] = value[0]  # Keras 3's LayerNormalization keeps its axis as a list
        elif key in accepted and key != "self":
            kwargs[key] = tuple(value) if key in ("target_shape", "dims") and isinstance(value, list) else value
        elif key in KERAS_ONLY:
            if not any(value == allowed for allowed in KERAS_ONLY[key]):
                raise ValueError(f"layer {name!r} ({cls_name}): {key}={value!r} is not supported by clnet "
                                 f"(it takes {KERAS_ONLY[key][0]!r} only)")
        else:
            raise ValueError(f"layer {name!r} ({cls_name}): clnet's {cls_name} has no argument {key!r} "
                             f"(got {value!r})")
    return cls(**kwargs)


def _clnet_class(cls_name: str, name: str) -> type:
    if cls_name not in KERAS_LAYERS:
        raise ValueError(f"layer {name!r} is a Keras {cls_name}, which clnet does not have")
    return getattr(layers_module, cls_name)


def _activation_from_keras(value, layer: str):
    if isinstance(value, dict):  # a serialized function: {"class_name": "function", "config": "relu"}
        value = value.get("config")
    if value is None:
        return None
    name = ACTIVATION_NAMES.get(value, value)
    try:
        activations.get(name)
    except (TypeError, ValueError):
        raise ValueError(f"layer {layer!r}: activation {value!r} is not one clnet has") from None
    return name


def _initializer_from_keras(value) -> str | None:
    """Keras's initializer by its name, where clnet has one of that name (its arguments are not
    kept: the weights come from the archive); None where clnet has none."""
    from . import initializers
    name = value if isinstance(value, str) else snake_case(value.get("class_name", ""))
    try:
        initializers.get(name)
    except (TypeError, ValueError):
        return None
    return name


def _set_weights(model: Model, entries: list, store: h5py.File) -> None:
    """Each layer's arrays from its group, all read and checked before any is set."""
    arrays = []
    for group, (entry, layer) in zip(_group_names([e for e, _ in entries]), entries):
        paths = weight_paths(entry) or _vars_in(store, f"layers/{group}/vars")
        try:
            found = [np.asarray(store[f"layers/{group}/{p}"]) for p in paths]
        except KeyError as error:
            raise ValueError(f"its model.weights.h5 lacks the weights of layer {layer.name!r} "
                             f"(layers/{group}): {error}") from None
        expected = [w.shape for w in layer.get_weights()]
        if [a.shape for a in found] != expected:
            raise ValueError(f"layer {layer.name!r} ({entry['class_name']}) has weights of shapes {expected}, "
                             f"but the archive holds {[a.shape for a in found]} at layers/{group}")
        arrays.append((layer, found))
    for layer, found in arrays:
        layer.set_weights(found)


def _vars_in(store: h5py.File, group: str) -> list[str]:
    if group not in store:
        return []
    return [f"vars/{k}" for k in sorted(store[group].keys(), key=int)]


def weight_paths(entry: dict) -> list[str] | None:
    """Where a layer's weights lie in its group, in get_weights' order; None: vars/0, vars/1, ..."""
    cls, config = entry["class_name"], entry["config"]
    if cls in RECURRENT:
        return [f"cell/vars/{i}" for i in range(3 if config.get("use_bias", True) else 2)]
    if cls == "Bidirectional":
        forward = weight_paths(config["layer"]) or []
        backward = weight_paths(config.get("backward_layer") or config["layer"]) or []
        return [f"forward_layer/{p}" for p in forward] + [f"backward_layer/{p}" for p in backward]
    if cls == "TimeDistributed":
        inner = weight_paths(config["layer"])
        if inner is None:
            inner = [f"vars/{i}" for i in range(_own_weights(config["layer"]))]
        return [f"layer/{p}" for p in inner]
    if cls == "MultiHeadAttention":
        return [f"{part}/vars/{i}" for part in ATTENTION_PARTS for i in range(2 if config.get("use_bias", True) else 1)]
    return None


def _own_weights(entry: dict) -> int:
    """The weights of a layer Keras keeps as vars/<i> (a TimeDistributed's inner layer)."""
    config = entry["config"]
    if entry["class_name"] in ("Dense", "Conv1D", "Conv2D"):
        return 2 if config.get("use_bias", True) else 1
    if entry["class_name"] in ("BatchNormalization",):
        return 2 + config.get("center", True) + config.get("scale", True)
    if entry["class_name"] == "LayerNormalization":
        return config.get("center", True) + config.get("scale", True)
    if entry["class_name"] == "Embedding":
        return 1
    return 0


def _group_names(entries: list[dict]) -> list[str]:
    """Keras's names of the layers' groups: each class in snake_case, a second of it _1, ..."""
    used: dict[str, int] = {}
    names = []
    for entry in entries:
        name = snake_case(entry["class_name"])
        if name in used:
            used[name] += 1
            name = f"{name}_{used[name]}"
        else:
            used[name] = 0
        names.append(name)
    return names


def _compile_from_keras(model: Model, config: dict) -> None:
    optimizer = config.get("optimizer")
    if isinstance(optimizer, dict):
        optimizer = _optimizer_from_keras(optimizer)
    loss = config.get("loss")
    if isinstance(loss, dict) and "class_name" in loss:
        loss = {"name": snake_case(loss["class_name"]),
                **{k: v for k, v in loss.get("config", {}).items() if k == "from_logits" and v}}
    metrics = config.get("metrics")
    model.compile(optimizer or "rmsprop", loss, metrics=metrics, loss_weights=config.get("loss_weights"),
                  weighted_metrics=config.get("weighted_metrics"))


def _optimizer_from_keras(entry: dict) -> optimizers.Optimizer:
    name = entry.get("class_name")
    cls = getattr(optimizers, str(name), None)  # Keras's class names: RMSprop, Adagrad, ... are clnet's too
    if not (isinstance(cls, type) and issubclass(cls, optimizers.Optimizer)):
        raise ValueError(f"its optimizer {name!r} is not one clnet has")
    config = dict(entry.get("config", {}))
    if cls is optimizers.LossScaleOptimizer and isinstance(config.get("inner_optimizer"), dict):
        config["inner_optimizer"] = _optimizer_from_keras(config["inner_optimizer"])
    for key, allowed in OPTIMIZER_KERAS_ONLY.items():
        if key in config:
            value = config.pop(key)
            if allowed is not None and value not in allowed:
                raise ValueError(f"its optimizer {name}: {key}={value!r} is not supported by clnet")
    if isinstance(config.get("learning_rate"), dict):
        raise ValueError(f"its optimizer {name}'s learning-rate schedule {config['learning_rate']!r} is not read "
                         "by clnet; load with compile=False and compile again")
    return cls.from_config(config)


# -- writing -------------------------------------------------------------------------------------
def save(model: Model, path) -> None:
    """`model` as a Keras 3 archive: its config in Keras's form, its weights in Keras's groups, its
    compile config (optimizer settings, loss, metrics; not the optimizer's state: that is the
    .h5 checkpoint's). Written aside and renamed: a failed save leaves the previous file."""
    path = Path(path)
    if not model.built:
        raise ValueError(f"cannot save to {str(path)!r}: the model is not built and has no weights yet; "
                         "call build(input_shape) or fit first")
    config, entries = _keras_config(model)
    if model.compiled:
        config["compile_config"] = _keras_compile_config(model)
    weights = io.BytesIO()
    with h5py.File(weights, "w") as store:
        store.create_group("vars").attrs["name"] = model.name
        layers_group = store.create_group("layers")
        for group, (entry, layer) in zip(_group_names([e for e, _ in entries]), entries):
            arrays = layer.get_weights()
            paths = weight_paths(entry) or [f"vars/{i}" for i in range(len(arrays))]
            node = layers_group.create_group(group)
            node.create_group("vars").attrs["name"] = layer.name
            for p, array in zip(paths, arrays):
                node.require_group(str(Path(p).parent))
                node.create_dataset(p, data=array)
    metadata = {"keras_version": "3.15.1", "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
                "written_by": "clnet"}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("metadata.json", json.dumps(metadata))
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", weights.getvalue(), compress_type=zipfile.ZIP_STORED)
    write_atomically(path, buffer.getvalue())


def _keras_config(model: Model) -> tuple[dict, list]:
    clnet_config = model.get_config()
    floatx = model.dtype.name
    if isinstance(model, Sequential):
        entries = [(_keras_entry(l, floatx), l) for l in model.layers]
        source = model.built_layers[0]
        input_entry = _input_entry(source, floatx)
        config = {"module": "keras", "class_name": "Sequential", "registered_name": None,
                  "config": {"name": model.name, "trainable": model.trainable, "dtype": floatx,
                             "layers": [input_entry, *(e for e, _ in entries)]},
                  "build_config": {"input_shape": input_entry["config"]["batch_shape"]}}
        return config, entries
    if "calls" not in clnet_config:
        raise ValueError(f"model {model.name!r} is a subclass without a graph to write in Keras's form; "
                         "save its weights (save_weights) or build it as a functional model")
    return _keras_functional(model, clnet_config, floatx)


def _keras_functional(model: Model, config: dict, floatx: str) -> tuple[dict, list]:
    objects = model.layers  # (in get_config's order)
    names = [entry["config"]["name"] for entry in config["layers"]]
    nodes = defaultdict(list)  # layer index -> its calls' inbound nodes
    shapes = model.tensor_shapes()

    def ref(r):
        key = (r[0], r[1], r[2] if len(r) > 2 else 0)
        return {"class_name": "__keras_tensor__",
                "config": {"shape": [None, *shapes[key]], "dtype": floatx, "keras_history": [names[r[0]], *key[1:]]}}

    for call in config["calls"]:
        layer = objects[call["layer"]]
        inputs = [ref(r) for r in call["inputs"]]
        nodes[call["layer"]].append(_inbound_node(layer, inputs))
    order = _keras_order(config)
    entries, written = [], []
    for index in order:
        layer = objects[index]
        if isinstance(layer, layers_module.Input):
            written.append({**_input_entry(layer, floatx), "name": names[index], "inbound_nodes": []})
            continue
        entry = _keras_entry(layer, floatx)
        entry["name"], entry["inbound_nodes"] = names[index], nodes[index]
        written.append(entry)
        entries.append((entry, layer))
    outs = [config["output"]] if "output" in config else config["outputs"]
    out_refs = [[names[r[0]], r[1], r[2] if len(r) > 2 else 0] for r in outs]
    in_refs = [[names[i], 0, 0] for i in config["inputs"]]
    keras = {"module": "keras.src.models.functional", "class_name": "Functional", "registered_name": "Functional",
             "config": {"name": model.name, "trainable": model.trainable, "layers": written,
                        "input_layers": in_refs[0] if len(in_refs) == 1 else in_refs,
                        "output_layers": out_refs[0] if "output" in config else out_refs},
             "build_config": {"input_shape": None}}
    return keras, entries


def _input_entry(layer, floatx: str) -> dict:
    config = layer.get_config()
    return {"module": "keras.layers", "class_name": "InputLayer",
            "config": {"batch_shape": [None, *config["shape"]], "dtype": config.get("dtype") or floatx,
                       "sparse": False, "ragged": False, "name": config["name"]},
            "registered_name": None}


def _inbound_node(layer, inputs: list) -> dict:
    """A call as Keras's node: its positional and keyword arguments."""
    if isinstance(layer, layers_module.MultiHeadAttention):
        wiring = layer.get_config()["wiring"]
        kwargs = {}
        if wiring["key"] != wiring["value"]:
            kwargs["key"] = inputs[wiring["key"]]
        if wiring.get("mask") is not None and not wiring.get("padding"):  # (Keras makes a padding one itself)
            kwargs["attention_mask"] = inputs[wiring["mask"]]
        if wiring.get("causal"):
            kwargs["use_causal_mask"] = True
        return {"args": [inputs[wiring["query"]], inputs[wiring["value"]]], "kwargs": kwargs}
    if getattr(layer, "multi_input", False) and isinstance(layer, _MERGES):
        return {"args": [inputs], "kwargs": {}}
    if len(inputs) > 1:  # a recurrent layer's initial states
        return {"args": [inputs[0]], "kwargs": {"initial_state": inputs[1:]}}
    return {"args": inputs, "kwargs": {}}


_MERGES = tuple(getattr(layers_module, n) for n in ("Add", "Multiply", "Concatenate") if hasattr(layers_module, n))


def _keras_order(config: dict) -> list[int]:
    """The layer indices in the order Keras's functional model lists its operations (its
    map_graph: by depth from the outputs, deepest first; within a depth, in the order a depth-first
    walk from the outputs first meets them), so that the weights' group numbers are the ones
    Keras gives when it rebuilds the model."""
    producer = {}  # (layer, k) -> input refs' nodes
    for_layer = defaultdict(int)
    for call in config["calls"]:
        k = for_layer[call["layer"]]
        for_layer[call["layer"]] += 1
        producer[call["layer"], k] = [(r[0], r[1]) for r in call["inputs"]]
    inputs = {(i, 0) for i in config["inputs"]}
    outs = [config["output"]] if "output" in config else config["outputs"]
    indices, finished, ordered = {}, set(), []

    def visit(node):
        if node in finished:
            return
        indices.setdefault(node[0], len(indices))
        for parent in producer.get(node, []):
            visit(parent)
        finished.add(node)
        ordered.append(node)

    for r in outs:
        visit((r[0], r[1]))
    node_depth, layer_depth = {}, {}
    for node in reversed(ordered):
        depth = max(node_depth.setdefault(node, 0), layer_depth.get(node[0], 0))
        layer_depth[node[0]] = node_depth[node] = depth
        for parent in producer.get(node, []):
            node_depth[parent] = max(depth + 1, node_depth.get(parent, 0))
    for node in inputs:
        if node[0] not in layer_depth:
            layer_depth[node[0]], indices[node[0]] = 0, -1
    by_depth = defaultdict(list)
    for layer, depth in layer_depth.items():
        by_depth[depth].append(layer)
    return [layer for depth in sorted(by_depth, reverse=True) for layer in sorted(by_depth[depth], key=indices.get)]


def _keras_entry(layer: Layer, floatx: str) -> dict:
    """A clnet layer's entry in Keras's config."""
    cls_name = type(layer).__name__
    if cls_name not in KERAS_LAYERS:
        made_by = (" (an op: clnet.ops, or a merge clnet traces into ops, Subtract, Average, Maximum, Minimum)"
                   if layer.__module__.startswith("clnet.ops") or cls_name in ("Elementwise", "FusedElementwise") else "")
        raise ValueError(f"layer {layer.name!r} is a clnet {cls_name}{made_by}, which clnet cannot write in Keras's "
                         "form; save the model as clnet's checkpoint (.h5) or export it to ONNX")
    config = dict(layer.get_config())
    config.pop("wiring", None)
    for key in ("activation", "recurrent_activation"):
        if key in config:
            config[key] = _activation_to_keras(config[key], layer.name)
    for key in ("layer", "backward_layer"):
        if isinstance(config.get(key), dict):
            config[key] = _nested_entry(config[key], floatx)
    # "trainable" only for a frozen layer of weights: Keras's SpatialDropout1D's constructor does
    # not take it.
    policy = layer.dtype_policy  # (a 16-bit one as given; clnet computed it in the model's type)
    config = {"name": config.pop("name"), "dtype": policy.name if policy.compute_dtype in SIXTEEN_BITS else floatx,
              **config}
    if not layer.trainable and layer.parameters:
        config["trainable"] = False
    return {"module": "keras.layers", "class_name": cls_name, "config": config, "registered_name": None}


def _nested_entry(entry: dict, floatx: str) -> dict:
    config = dict(entry["config"])
    for key in ("activation", "recurrent_activation"):
        if key in config:
            config[key] = _activation_to_keras(config[key], config.get("name"))
    return {"module": "keras.layers", "class_name": entry["class_name"],
            "config": {"name": config.pop("name"), "dtype": config.pop("dtype", floatx), **config},
            "registered_name": None}


def _activation_to_keras(config, layer: str) -> str:
    if config is None:
        return "linear"
    if isinstance(config, str):
        return config
    name = config.get("name")
    made = activations.get(name)
    params = {k: v for k, v in config.items() if k != "name"}
    default = type(made)().get_config() if hasattr(type(made)(), "get_config") else {"name": name}
    if name == "lrelu" and params.get("a") == 0.2:
        return "leaky_relu"
    if name in KERAS_ACTIVATIONS and all(default.get(k) == v for k, v in params.items()):
        return name
    raise ValueError(f"layer {layer!r}: activation {config!r} has no Keras name (Keras's activations take "
                     "no parameters); save as clnet's checkpoint (.h5) or export to ONNX")


def _keras_optimizer(optimizer: optimizers.Optimizer) -> dict:
    """`optimizer` as Keras serializes one, a LossScaleOptimizer's inner optimizer too."""
    config = optimizer.get_config()
    name = KERAS_OPTIMIZERS.get(type(optimizer).__name__, type(optimizer).__name__)
    if isinstance(optimizer, optimizers.LossScaleOptimizer):
        config["inner_optimizer"] = _keras_optimizer(optimizer.inner_optimizer)
    for key in ("l1", "l2"):
        if config.pop(key, 0.0):
            raise ValueError(f"optimizer {name} has {key}={optimizer.get_config()[key]}, which Keras's "
                             "optimizers do not have; save as clnet's checkpoint (.h5)")
    return {"module": "keras.optimizers", "class_name": name, "config": config, "registered_name": None}


def _keras_compile_config(model: Model) -> dict:
    compiled = model.compile_config()
    return {"optimizer": _keras_optimizer(model.optimizer),
            "loss": compiled["loss"], "loss_weights": model.loss_weights, "metrics": compiled["metrics"],
            "weighted_metrics": compiled.get("weighted_metrics"),
            "run_eagerly": False, "steps_per_execution": 1, "jit_compile": False}
