"""Sequential: a stack of layers, compiled with a loss and an optimizer, trained on the device."""
from __future__ import annotations

import copy
import inspect
import sys
import time
import weakref
from collections.abc import Iterator
from contextlib import closing, nullcontext

import numpy as np
from tqdm.auto import tqdm

from . import losses, ops, optimizers
from .callbacks import CallbackList, History
from .cl import runtime as cl_runtime
from .cl.parameters import ParameterStore, parameter_ranges
from .cl.tensor import Tensor
from . import data
from .data import ArrayFeed, Batches, Stream, checked, is_stream
from .layers import Input, Layer
from .layers.base import (Call, HasWeights, KerasTensor, ModelMode, check_call_arguments, has_lengths, is_concrete, leaves_of,
                          register_custom_objects, tensors_of, trace_scope, tracing)
from .layers.merge import merge_program
from .losses.base import SOFTMAX_HERE

METRICS = {"accuracy": "accuracy", "acc": "accuracy"}
UNKNOWN_STEPS_REFRESH = 50  # progress-bar reads per epoch of unknown length: one every this many steps
_global_seed: int | None = None


def set_seed(seed: int) -> None:
    """Seed for models created afterwards: weight initialisation and shuffling repeat exactly."""
    global _global_seed
    _global_seed = _check_int("seed", seed, minimum=0)


class NotCompiledError(ValueError, RuntimeError):
    pass


class NotBuiltError(ValueError, RuntimeError):
    """The model does not know its input shape yet, so it has no weights."""


class Model(HasWeights):
    """A graph of layer calls from one or more `Input`s to one output, trained on the device.

    `x = Input((8,)); h = Dense(8, "relu")(x); y = Dense(1)(Add()([x, h])); Model(x, y)`. Every
    training step runs the calls in the order they were made (a topological order), then their
    backward passes in reverse; a tensor read by several calls gets the sum of their gradients,
    and a layer called twice shares its weights (its extra calls run as copies whose gradients are
    added into the owner's). A call may give several tensors (a recurrent layer's final states),
    each read on its own. `Sequential` is this engine over a chain."""

    def __init__(self, inputs=None, outputs=None, name: str | None = None, floatx: str | None = None,
                 seed: int | None = None):
        self.name = name or self.default_name
        self.dtype = cl_runtime.floatx_dtype(floatx)
        self._floatx_given = floatx is not None  # else a model of layers built already takes their type
        if seed is None:
            seed = _global_seed if _global_seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.seed = _check_int("seed", seed, minimum=0)
        self._layers: list[Layer] = []
        self._inputs: list[Input] = []  # (a subclassed model's: traced on its first data)
        self.built = False
        self.compiled = False
        self.stop_training = False
        self.epoch = 0  # epochs completed, for checkpoints
        self.distribution = None  # a clnet.distribute strategy, set by compile
        # The graph as given, where an Input has lengths of None (Input((None, 8))): the model runs
        # it made again on each data's lengths (_instantiate), sharing its layers.
        self._pattern: dict | None = None
        self._in_fit = False
        if type(self) is Model:
            self._set_graph(inputs, outputs)
            if has_lengths([i.input_shape for i in self._inputs]):
                self._pattern = {"inputs": self._inputs, "calls": self._calls, "outputs": self._outputs,
                                 "layers": self._layers}
            self.build()

    default_name = "model"

    # -- the graph -----------------------------------------------------------------------------
    def _set_graph(self, inputs, outputs) -> None:
        """Check the graph (every input reaches the output and the output needs only the inputs),
        name its layers and keep its calls in topological order."""
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if not inputs or not all(isinstance(i, Input) or (isinstance(i, KerasTensor) and isinstance(i.call.layer, Input))
                                 for i in inputs):
            raise TypeError(f"Model inputs must be Input(shape) objects (or their outputs), got {inputs!r}")
        self._inputs = [i if isinstance(i, Input) else i.call.layer for i in inputs]
        # Keras's structures: one tensor, a list (or tuple) of them, or a dict of them by name;
        # predict gives back the same structure, and losses, weights and targets follow it.
        if isinstance(outputs, dict):
            self._output_structure = "dict"
            names, outputs = [str(k) for k in outputs], list(outputs.values())
        else:
            self._output_structure = "list" if isinstance(outputs, (list, tuple)) else "single"
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            names = None
        if not outputs or not all(isinstance(o, KerasTensor) for o in outputs):
            raise TypeError(f"Model outputs must be layer calls' outputs: one, a list or a dict of them, got {outputs!r}")
        if len({id(o) for o in outputs}) != len(outputs):
            raise ValueError("each output tensor may be given to Model only once")
        for o in outputs:
            if not o.batched:
                raise ValueError(f"the output {o.describe()} does not depend on any input (it is made of weights or "
                                 "constants alone, the same for every sample); a model's outputs are computed from "
                                 "its inputs")
        self._outputs = outputs
        self._output_names = names  # set below from the layers' names where not given
        calls, stack, seen = [], [o.call for o in outputs], set()
        while stack:  # every call the output depends on
            call = stack.pop()
            if id(call) not in seen:
                seen.add(id(call))
                calls.append(call)
                stack.extend(t.call for t in call.inputs)
        calls.sort(key=lambda c: c.number)
        reached = [c.layer for c in calls if isinstance(c.layer, Input)]
        described = ", ".join(o.describe() for o in outputs)
        for layer in reached:
            if not any(layer is i for i in self._inputs):
                raise ValueError(f"the output {described} is not reachable from the model's inputs alone: it also "
                                 f"depends on {layer.describe()}, which is not among them")
        for layer in self._inputs:
            if not any(layer is r for r in reached):
                raise ValueError(f"model input {layer.describe()} reaches no output: the output {described} does "
                                 "not depend on it")
        if len({id(i) for i in self._inputs}) != len(self._inputs):
            raise ValueError("each Input may be given to Model only once")
        self._calls = [c for c in calls if not isinstance(c.layer, Input)]
        self._layers = []
        for layer in [*self._inputs, *(c.layer for c in self._calls)]:
            if not any(layer is l for l in self._layers):
                _name(layer, self._layers)
                self._layers.append(layer)
        if self._output_names is None:  # Keras: each output by its layer's name (lstm, lstm_1 for its states)
            taken: set[str] = set()
            self._output_names = [_output_name(o, taken) for o in outputs]

    def describe(self) -> str:
        return f"model {self.name!r}"

    # -- a model as a layer, and subclassed models -------------------------------------------------
    def __call__(self, inputs, training=None, mask=None):
        """Apply the model to symbolic tensors, as Keras's nested models: each of its layer calls
        again, on `inputs` (one, a list, or a dict by input name), sharing the layers' weights;
        returns its outputs in the structure it was made with. An unbuilt model calls its layers
        (or its call()) on them, and the model that reads them builds them. The calls are the
        outer model's own (its `layers` list the nested model's layers, not the model)."""
        check_call_arguments(self, (), training=training, mask=mask)
        if not tracing() and is_concrete(inputs):  # on arrays, as Keras's eager call: the outputs now
            return self.predict_on_batch(inputs)
        given = tensors_of(inputs)
        if not self.built and self._pattern is None:
            leaves = leaves_of(given)
            if not leaves or not all(isinstance(t, KerasTensor) for t in leaves):
                raise TypeError(f"model {self.name!r} was called on {inputs!r}; expected symbolic tensors")
            # Its layers (or its call()) on the tensors, as in Keras: the model that reads them builds
            # them, in its own float type; this one, built later, shares them.
            if type(self).call is not Model.call:
                return self.call(given)
            tensor = given
            for layer in self._layers:
                if isinstance(layer, Input):
                    if leaves[0].sample_shape != layer.input_shape:
                        raise ValueError(f"model {self.name!r} starts with {layer.describe()} of shape "
                                         f"{layer.output.shape}, got a tensor of shape {leaves[0].shape}")
                    continue
                tensor = layer(tensor)
            return tensor
        graph = self._pattern or {"inputs": self._inputs, "calls": self._calls, "outputs": self._outputs}
        names = [i.name for i in graph["inputs"]]
        pairs = (_by_name(given, names, "inputs", "input") if len(names) > 1 or isinstance(given, dict)
                 else [(0, given[0] if isinstance(given, (list, tuple)) and len(given) == 1 else given)])
        made = {}
        for (_, tensor), source in zip(pairs, graph["inputs"]):
            if not isinstance(tensor, KerasTensor) or not _fits(tensor.sample_shape, source.input_shape):
                raise ValueError(f"model {self.name!r} input {source.name!r} takes tensors of shape "
                                 f"{source.output.shape}, got {getattr(tensor, 'shape', tensor)!r}")
            made[id(source.output)] = tensor
        return self._structured(_replayed(graph, made))

    def _instantiate(self, shapes: list[tuple]) -> None:
        """The graph as given (self._pattern) made again on Inputs of the data's `shapes`, each
        layer called again (a built one keeps its weights, see Layer.check_weights_fit): the
        graph this model then builds and runs."""
        inputs = self._pattern["inputs"]
        sources = [Input(shape, name=i.name, dtype=i.input_dtype) for i, shape in zip(inputs, shapes)]
        outputs = _replayed(self._pattern, {id(i.output): s.output for i, s in zip(inputs, sources)})
        structure = (dict(zip(self._output_names, outputs)) if self._output_structure == "dict"
                     else outputs if self._output_structure == "list" else outputs[0])
        self._set_graph(sources, structure)

    def call(self, inputs, *args, **kwargs):
        """A subclass's computation, as Keras's Model.call: traced once, on Input tensors of the
        shape of the first data it meets (or of build(input_shape)), into the model's graph."""
        raise NotImplementedError(f"model {self.name!r} defines no call()")

    def _trace(self, input_shape) -> None:
        """A subclassed model's graph: call() on Inputs of `input_shape` (a list of shapes: one
        Input each), its layers called as in any functional model."""
        several = _several(input_shape)
        inputs = [Input(shape) for shape in input_shape] if several else [Input(input_shape)]
        mode = {"training": ModelMode()} if "training" in inspect.signature(self.call).parameters else {}
        try:
            with trace_scope():
                outputs = self.call(inputs if several else inputs[0], **mode)
        except Exception as error:
            error.add_note(f"(raised while tracing {type(self).__name__}.call() of model {self.name!r} on symbolic "
                           "tensors)")
            raise
        outputs = tensors_of(outputs)
        if not leaves_of(outputs) or not all(isinstance(t, KerasTensor) for t in leaves_of(outputs)):
            raise TypeError(f"{type(self).__name__}.call() returned {outputs!r}; a traced call() must return the "
                            "symbolic tensors that clnet layers and ops gave it (one, a list or a dict of them)")
        self._set_graph(inputs, outputs)

    @property
    def layers(self) -> list[Layer]:
        """The model's layers in call order, each once, its Inputs first, as Keras's functional
        `model.layers` (a Sequential's leaves its Input out, as Keras's does). A model of lengths
        None lists its Inputs as given, with None."""
        return list(self._pattern["layers"] if self._pattern else self._layers)

    @property
    def inputs(self) -> list[KerasTensor]:
        """The model's input tensors (one per Input, in order), as Keras's `model.inputs`; those
        it was given, with their lengths of None, where it has some."""
        return [i.output for i in (self._pattern["inputs"] if self._pattern else self._inputs)]

    @property
    def input(self):
        """The model's input tensor, or their list for a model of several, as Keras's."""
        inputs = self.inputs
        return inputs[0] if len(inputs) == 1 else inputs

    @property
    def output(self):
        """The model's output tensor, or their list (dict) as the model was given them, as Keras's."""
        return self._structured(self.outputs)

    @property
    def outputs(self) -> list[KerasTensor]:
        """The model's output tensors, in order, as Keras's `model.outputs` (those it was given)."""
        return list(self._pattern["outputs"] if self._pattern else self._outputs)

    @property
    def output_names(self) -> list[str]:
        """Each output's name: its dict key, else its layer's name, as Keras's; the keys of
        compile's loss and metrics dicts, of fit's target dicts and of the History's logs."""
        return list(self._output_names)

    @property
    def weights(self) -> list:
        """Every weight of the model's layers as Variables, each once, as Keras's `model.weights`."""
        found = {}
        for layer in self._layers:
            found.update((id(v), v) for v in layer.weights)
        return list(found.values())

    @property
    def calls(self) -> list[Call]:
        """Every layer call from the inputs to the output, in the order made (a topological order)."""
        return list(self._calls)

    @property
    def input_shape(self):
        """The sample shape of the (first) input, or None while the model does not know it."""
        first = self._layers[0] if self._layers else None
        return None if first is None else first.input_shape

    def build(self, input_shape=None) -> None:
        """Build every layer on the current device (a functional model is built when made). A
        layer built already (by another model, or trained) is not built again: it keeps its
        weights, which this model then reads and trains where they are, as Keras's shared layers.
        A subclassed model's call() is traced first, on Inputs of `input_shape`."""
        if self._pattern is not None and self._inputs is self._pattern["inputs"]:
            if input_shape is None:  # (built when data gives the lengths)
                return
            self._instantiate(input_shape if _several(input_shape) else [input_shape])
        if type(self).call is not Model.call and not self._layers:
            if input_shape is None:
                raise NotBuiltError(f"model {self.name!r} ({type(self).__name__}) is traced on Inputs of the "
                                    "first data's shape: call build(input_shape), fit or predict first")
            self._trace(input_shape)
        self.rt = cl_runtime.runtime()
        built = {layer.dtype for layer in self._layers if layer.built and not isinstance(layer, Input)}
        if not self._floatx_given and len(built) == 1:  # (as Keras's layers keep their dtype)
            self.dtype = built.pop()
        self.rt.check_dtype(self.dtype)
        store = ParameterStore(self.rt, self.dtype)  # for the layers this model builds
        index = {id(layer): i for i, layer in enumerate(self._layers)}
        for layer in self._inputs:
            layer.build(layer.input_shape, store, None)
        owned: dict[int, list] = {}   # layer -> the parameters its build declared, in order
        self._steps = []              # (layer or its copy, call), in call order
        fresh = set()                 # the layers (and copies) this build made
        # What runs: the graph's calls, each chain of elementwise ops one generated kernel (a
        # layer of its own, made here; the graph, self._calls, stays as made).
        runs = ops.fuse_elementwise(self._calls, self._outputs)
        for call in runs:
            layer = call.layer
            shapes = [t.sample_shape for t in call.inputs]
            shape = shapes if layer.multi_input else shapes[0]
            if layer.built and (layer.rt is not self.rt or layer.dtype != self.dtype):
                raise ValueError(f"{layer.describe()} was built in {layer.dtype.name} on {layer.rt.info.name}; "
                                 f"model {self.name!r} computes in {self.dtype.name} on {self.rt.info.name}: "
                                 "a model shares a layer's weights only on the same device and float type")
            if id(layer) in owned or layer.built and shape != layer.built_input_shape:
                # Another call of a layer, or a call on another shape than it was built for (a
                # recurrent layer over fewer steps): a copy with buffers of its own, reading the
                # same parameters, whose shapes must be the same (_SharingStore checks).
                owned.setdefault(id(layer), _declared[layer])
                runner = copy.copy(layer)
                runner.allocated_rows = 0  # (its own batch buffers, made by allocate)
                runner.build(shape, _SharingStore(store, owned[id(layer)], layer, shape), np.random.default_rng(0))
                fresh.add(id(runner))
            elif layer.built:  # built by another model: it runs as it is
                owned[id(layer)] = _declared[layer]
                runner = layer
            else:
                recorder = _DeclaringStore(store)
                layer.build(shape, recorder, np.random.default_rng([self.seed, index.get(id(layer), 0)]))
                owned[id(layer)] = _declared[layer] = recorder.declared
                runner = layer
                fresh.add(id(runner))
            self._steps.append((runner, call))
        # Which layers write y^T as well as y: those a layer reading x^T reads (a view, such as
        # Flatten, passes on its input's y^T, so it reads x^T where a layer above it does). A
        # layer another model built keeps writing its y^T where that model's readers need it.
        producers = {id(t): runner for runner, call in self._steps for t in call.outputs}
        for runner, _ in self._steps:
            if id(runner) in fresh:
                runner.writes_transposed = False
        for runner, call in reversed(self._steps):  # the readers of a call's output come after it
            if runner.reads_transposed:
                for t in call.inputs:
                    maker = producers.get(id(t))
                    if maker is not None and not maker.writes_transposed:
                        maker.writes_transposed = True
                        if maker.allocated_rows:  # allocated by another model: now with its y^T too
                            maker.allocate(maker.allocated_rows)
        # The same for the batch gather, which writes the batch's x^T where a layer reading a
        # single input reads it (a model of several inputs splits the batch, see _forward).
        first = self._inputs[0].output if len(self._inputs) == 1 else None
        self._batch_transposed = any(runner.reads_transposed and any(t is first for t in call.inputs)
                                     for runner, call in self._steps)
        consumers: dict[int, int] = {}  # calls reading each tensor
        for call in runs:
            for t in call.inputs:
                consumers[id(t)] = consumers.get(id(t), 0) + 1
        for o in self._outputs:  # an output's loss reads it too
            consumers[id(o)] = consumers.get(id(o), 0) + 1
        self._fold_residual_sums(producers, consumers)
        store.allocate()
        self._own_store = store
        parameters = list({id(p): p for layer in self._layers for p in _declared.get(layer, ())}.values())
        stores = {id(p.store): p.store for p in parameters}
        # The one store that holds exactly this model's parameters, if one does (the model built
        # all its layers): what a distribution reads and writes flat.
        if not stores:
            self._whole_store = store
        else:
            only = stores.popitem()[1] if len(stores) == 1 else None
            self._whole_store = only if only is not None and len(only.parameters) == len(parameters) else None
        self._ranges = parameter_ranges(parameters)
        for s in [store, *(p.store for p in parameters)]:
            s.users.add(self)
        shapes = [o.sample_shape for o in self._outputs]
        self.output_shape = shapes[0] if len(shapes) == 1 else shapes
        self._heads = [_Head(self.rt, self.dtype, o, name, consumers[id(o)] > 1)
                       for o, name in zip(self._outputs, self._output_names)]
        # Tensors read by several calls (an output's loss counting as one): their gradient is
        # summed into a buffer of the engine's.
        self._fan_out = [t for t in {id(t): t for t in [*self._outputs, *(t for c in runs for t in c.inputs)]}.values()
                         if consumers[id(t)] > 1]
        self._sum = self.rt.kernel(merge_program(self.rt, self.dtype), "Sum", self.dtype)
        self._split = self.rt.kernel(merge_program(self.rt, self.dtype), "CopyBlock", self.dtype)
        self._input_widths = [int(np.prod(i.input_shape)) for i in self._inputs]
        self.capacity = 0
        self._grad_plans = {}
        self.built = True
        self._check_ready()

    @property
    def store(self) -> ParameterStore:
        """The parameter store holding exactly this model's parameters, flat (see
        cl/parameters.py): a model that built all of its layers has one."""
        if self._whole_store is None:
            raise ValueError(f"model {self.name!r} has layers whose weights another model built and keeps in its "
                             "own parameter store, so its parameters are not one flat store; this needs a model "
                             "that built all of its layers")
        return self._whole_store

    def _check_ready(self):
        if self.built and self.compiled:
            # A model made again on other lengths trains the same parameters: its optimizer keeps
            # its moments (and step count) where the ranges are the same.
            bound = getattr(self.optimizer, "ranges", None)
            if bound is None or [(id(r.store), r.start, r.size) for r in bound] != [
                    (id(r.store), r.start, r.size) for r in self._ranges]:
                self.optimizer.bind(self._ranges, self.rt, self.dtype)
            for head, loss, weight, metrics in zip(self._heads, self._losses, self._loss_weights, self._metrics):
                head.compile(loss, weight, metrics)
            self._logit_outputs = {id(head.tensor) for head in self._heads if head.softmax_in_loss}
            self._stats_size = 0

    def compile(self, optimizer="adam", loss="categorical_crossentropy", metrics=None, distribution=None,
                loss_weights=None) -> None:
        """As Keras's compile. A model of several outputs takes `loss` and `loss_weights` as one
        for all, a list in output order or a dict by output name, and `metrics` as a list per
        output or a dict by output name; the loss it minimises is the weighted sum of its
        outputs' losses. `distribution`: a clnet.distribute strategy (default: the one whose
        scope() is open)."""
        from .distribute import Distribution, current
        if distribution is not None and not isinstance(distribution, Distribution):
            raise TypeError(f"distribution must be a clnet.distribute strategy (DataParallel, MPIDataParallel) "
                            f"or None, got {distribution!r}")
        names = self.output_names if self.built or type(self) is Model else ["output"]
        if isinstance(loss, dict) and "name" in loss and "name" not in names:  # a loss's own config
            loss = losses.get(loss)
        self._losses = _per_output(loss, names, "loss", _loss)
        self._loss_weights = _per_output(loss_weights, names, "loss_weights", _loss_weight)
        if metrics is not None and len(names) > 1 and not isinstance(metrics, dict) and not (
                isinstance(metrics, (list, tuple)) and all(isinstance(m, (list, tuple)) or m is None for m in metrics)):
            raise ValueError(f"metrics of a model of several outputs {names} must be a dict by output name or a list "
                             f"of one list per output, as Keras's; got {metrics!r}")
        self._metrics = _per_output(metrics, names, "metrics", _metric_names, listed=len(names) > 1)
        self.optimizer = optimizers.get(optimizer)
        self.loss = self._losses[0] if len(names) == 1 else dict(zip(names, self._losses))
        self.metrics = self._metrics[0] if len(names) == 1 else dict(zip(names, self._metrics))
        self.loss_weights = None if loss_weights is None else dict(zip(names, self._loss_weights))
        self.compiled = True
        self._check_ready()
        self.distribution = distribution or current()
        if self.distribution is not None:
            if len(names) > 1:
                raise ValueError(f"{type(self.distribution).__name__} trains models of one output; model "
                                 f"{self.name!r} has {len(names)} ({names})")
            if self.built and self._whole_store is None:
                raise ValueError(f"{type(self.distribution).__name__} reduces a model's parameters as one flat "
                                 f"store, but model {self.name!r} shares layers another model built (their "
                                 "weights stay in that model's store); distribute the model that built them")
            self.distribution.attach(self)

    def compile_config(self) -> dict:
        """compile's loss, metrics and loss weights as JSON-able values (a checkpoint's training
        config): compile(optimizer, **compile_config()) compiles the same step again."""
        self._require_compiled("compile_config")
        several = len(self._heads) > 1
        config = {"loss": ({n: l.get_config() for n, l in zip(self.output_names, self._losses)} if several
                           else self._losses[0].get_config()),
                  "metrics": dict(zip(self.output_names, self._metrics)) if several else self._metrics[0]}
        if self.loss_weights is not None:
            config["loss_weights"] = self.loss_weights
        return config

    def _fold_residual_sums(self, producers: dict, consumers: dict) -> None:
        """Residual sums folded into a term's producer (Layer.adds_to_output): an Add of two
        tensors, the only reader of one, b, whose producer adds the other, a, ready before it runs
        (an input, or made earlier). Sets self._residuals, id(b's call) -> a, and self._folded,
        id(Add's call) -> b: the Add's output is b's, and it launches nothing. In a transformer
        every block's two residual sums fold into the attention's and the feed-forward's last
        Dense; on the H100 the tiny GPT's 8 Sums took 10 us each."""
        order = {id(i.output): -1 for i in self._inputs}
        order.update({id(t): k for k, (_, call) in enumerate(self._steps) for t in call.outputs})
        self._residuals, self._folded = {}, {}
        calls = {id(call.output): call for _, call in self._steps}
        for runner, call in self._steps:
            if not runner.sums_inputs or len(call.inputs) != 2 or call.inputs[0] is call.inputs[1]:
                continue
            for b, a in (call.inputs, call.inputs[::-1]):
                maker = producers.get(id(b))
                if (maker is not None and maker.adds_to_output and b.index == 0 and consumers[id(b)] == 1
                        and id(calls[id(b)]) not in self._residuals and order[id(a)] < order[id(b)]):
                    self._residuals[id(calls[id(b)])] = a
                    self._folded[id(call)] = b
                    break

    # -- device buffers ----------------------------------------------------------------------
    def _ensure_capacity(self, rows: int) -> None:
        if rows > self.capacity:
            # A layer shared with another model may hold more rows already: it never shrinks.
            for layer in [*self._inputs, *(runner for runner, _ in self._steps)]:
                layer.ensure_rows(rows)
            self._grad_sums = {id(t): Tensor((rows, *t.sample_shape), self.dtype, self.rt) for t in self._fan_out}
            self._input_batches = ([Tensor((rows, *i.input_shape), self.dtype, self.rt) for i in self._inputs]
                                   if len(self._inputs) > 1 else [])
            self.capacity = rows
        if self.compiled:
            for head in self._heads:
                head.ensure_rows(self.capacity, len(self._heads) > 1)

    def _ensure_stats(self, samples: int) -> None:
        """Per-sample loss and accuracy for `samples`, in the loss kernel's blocks per sample. A
        stream's epoch grows them as it goes, at least doubling, with a device-side copy of what
        the epoch has written so far."""
        if samples > self._stats_size:
            size = max(samples, 2 * self._stats_size)
            for head in self._heads:
                head.grow_stats(size, self._stats_size)
            self._stats_size = size

    def _needs_input_grad(self, want_input_grad: bool) -> dict[int, list[bool]]:
        """Per call, which of its inputs need a gradient: those downstream of a parameter (or, when
        `want_input_grad`, of a model input)."""
        if want_input_grad not in self._grad_plans:
            upstream = {id(i.output): want_input_grad for i in self._inputs}
            plan = {}
            for runner, call in self._steps:
                plan[id(call)] = [upstream[id(t)] for t in call.inputs]
                needed = any(plan[id(call)]) or any(p.trainable for p in runner.parameters)
                upstream.update({id(t): needed for t in call.outputs})
            self._grad_plans[want_input_grad] = plan
        return self._grad_plans[want_input_grad]

    # -- one batch ---------------------------------------------------------------------------
    def _forward(self, x: Tensor, rows: int, training: bool = False, logits: bool = False) -> list[Tensor]:
        """The outputs for a batch `x` (rows, all inputs' features side by side), in order; with
        `logits`, where an output's loss takes its layer's softmax (_Head.softmax_in_loss), that
        layer's softmax input instead (its forward_logits)."""
        # The mode every layer sees: fit trains (Dropout drops, BatchNormalization normalises with
        # and updates batch statistics); evaluate, predict and validation infer. `step`, the
        # optimizer's update count (restored from a checkpoint), seeds per-step randomness, so a
        # resumed run draws the masks an uninterrupted one does.
        step = self.optimizer.iterations if training else 0
        values = {}
        if len(self._inputs) == 1:
            values[id(self._inputs[0].output)] = x
        else:  # one gathered batch holds every input's columns: give each input its own
            offset, total = 0, sum(self._input_widths)
            for layer, width, batch in zip(self._inputs, self._input_widths, self._input_batches):
                self._split((width, rows), None, x, total, offset, batch, width, 0, width)
                values[id(layer.output)] = batch
                offset += width
        for runner, call in self._steps:
            folded = self._folded.get(id(call))
            if folded is not None:  # its sum was made by the producer of `folded` (_fold_residual_sums)
                values[id(call.output)] = values[id(folded)]
                continue
            runner.training, runner.step = training, step
            xs = [values[id(t)] for t in call.inputs]
            forward = runner.forward_logits if logits and id(call.output) in self._logit_outputs else runner.forward
            residual = self._residuals.get(id(call))
            added = {} if residual is None else {"add": values[id(residual)]}
            result = forward(xs if runner.multi_input else xs[0], _rows(call, rows), **added)
            if len(call.outputs) == 1:
                values[id(call.output)] = result
            else:  # a list, an output per tensor (a recurrent layer's states)
                values.update({id(t): value for t, value in zip(call.outputs, result)})
        return [values[id(o)] for o in self._outputs]

    def _forward_loss(self, x: Tensor, target: Tensor, rows: int, first: int, training: bool = False) -> None:
        """The forward pass, then the output gradient and per-sample loss/accuracy at [first,
        first + rows). As in Keras the last axis is what a loss compares (the classes), averaged
        over the other axes (time). Where the loss folds the output layer's softmax, the layer
        hands over softmax's input and the loss kernel takes the softmax: one launch fewer per
        step (~9 us of host time on the H100, where small batches are launch-bound)."""
        outputs = self._forward(x, rows, training, logits=True)
        if len(self._heads) == 1:
            self._heads[0].launch(target, outputs[0], rows, first)
            return
        # The batch's targets lie side by side, an output's after another's: each loss reads its own.
        offset, total = 0, sum(head.width for head in self._heads)
        for head, output in zip(self._heads, outputs):
            self._split((head.width, rows), None, target, total, offset, head.target, head.width, 0, head.width)
            head.launch(head.target, output, rows, first)
            offset += head.width

    def _backward(self, rows: int, plan: dict[int, list[bool]], reads=None) -> list[Tensor | None]:
        """Parameter gradients for the last forward pass; returns dL/d(input) per model input
        (None where `plan` did not ask for it). `reads`, a distribution's (PieceReads), if given:
        its layers hand over gradients in parts meanwhile, and reads.done(runner) is called once
        each layer's backward is enqueued (the distribution starts copying its gradients then)."""
        grads = {}
        for head in self._heads:
            self._add_gradient(grads, head.tensor, head.output_grad, rows)
        with reads.handing_over() if reads is not None else nullcontext():
            for runner, call in reversed(self._steps):
                output_grads = [grads.pop(id(t), None) for t in call.outputs]
                if all(g is None for g in output_grads):  # nothing upstream has parameters (or was asked for)
                    continue
                self._backward_call(runner, call, output_grads, _rows(call, rows), plan[id(call)], grads)
                if reads is not None:
                    self.rt.join_side()  # the distribution copies this layer's gradients now
                    reads.done(runner)
        self.rt.join_side()
        self._own_store.add_shared_gradients()
        return [grads.get(id(i.output)) for i in self._inputs]

    def _backward_call(self, runner, call, output_grads: list, rows: int, wanted: list[bool], grads: dict) -> None:
        """One call's backward pass, given its outputs' gradients (None for an output nothing
        read, of a call with several); the gradients of its inputs go into `grads`."""
        grad = output_grads[0]
        states = {"state_grads": output_grads[1:]} if len(output_grads) > 1 else {}
        if runner.multi_input:
            results = runner.backward(grad, rows, wanted, **states)
        else:
            folded = any(head.fold and call.output is head.tensor for head in self._heads)
            # The input's gradient from its later readers, where this layer adds its own to it.
            earlier = grads.get(id(call.inputs[0])) if wanted[0] and runner.adds_to_input_grad else None
            added = states | ({} if earlier is None else {"add_to": earlier})
            results = [runner.backward(grad, rows, wanted[0], activation_done=folded, **added)]
            if earlier is not None:
                grads[id(call.inputs[0])] = results[0]
                return
        for t, result, want in zip(call.inputs, results, wanted):
            if want:
                self._add_gradient(grads, t, result, rows)

    def _add_gradient(self, grads: dict, tensor: KerasTensor, grad: Tensor, rows: int) -> None:
        if id(tensor) not in grads:
            grads[id(tensor)] = grad
            return
        total = (rows if tensor.batched else 1) * int(np.prod(tensor.sample_shape))
        into = self._grad_sums[id(tensor)]
        self._sum(*self.rt.four_per_item(total), grads[id(tensor)], grad, into, total)
        grads[id(tensor)] = into

    def _totals_now(self, count: int) -> tuple[float, float]:
        """Sum of per-sample loss and accuracy over [0, count) of a model of one output: the only
        read of a training loop."""
        return self._heads[0].totals(count)

    def _logs(self, count: int, prefix: str = "") -> dict:
        """The logs Keras writes: `loss`, the weighted sum of the outputs' losses; with several
        outputs each one's own (`<name>_loss`), then the metrics (`<name>_accuracy`) by name."""
        totals = [head.totals(count) for head in self._heads]
        logs = {prefix + "loss": sum(head.weight * loss for head, (loss, _) in zip(self._heads, totals)) / count}
        several = len(self._heads) > 1
        if several:
            logs.update({f"{prefix}{head.name}_loss": loss / count for head, (loss, _) in zip(self._heads, totals)})
        metrics = {f"{prefix}{head.name + '_' if several else ''}{metric}": hits / count
                   for head, (_, hits) in zip(self._heads, totals) for metric in head.metrics}
        return logs | dict(sorted(metrics.items()))

    def _train_logs(self, seen: int, running: bool = False) -> dict:
        """The epoch's training logs, over every replica's rows under a distribution (`running`:
        for the progress bar, which only the chief shows)."""
        return self._logs(seen) if self.distribution is None else self.distribution.logs(self, seen, running)

    # -- public training API -----------------------------------------------------------------
    def fit(self, x, y=None, batch_size=32, epochs=1, verbose=1, callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, initial_epoch=0, steps_per_epoch=None,
            validation_steps=None) -> History:
        """x, y: arrays (a memmap too); or x alone, a generator or PyDataset giving (x, y) batches
        (batch_size is then not used). An epoch is steps_per_epoch batches if given, else all of
        the data (a generator: until it is exhausted)."""
        self._in_fit, self._fit_shapes = True, None  # (the lengths of its first data stay: _meet_shapes)
        try:
            self._require_compiled("fit")
            batch_size = _check_int("batch_size", batch_size, minimum=1)
            epochs = _check_int("epochs", epochs, minimum=0)
            initial_epoch = _check_int("initial_epoch", initial_epoch, minimum=0)
            steps_per_epoch = _check_steps("steps_per_epoch", steps_per_epoch)
            validation_steps = _check_steps("validation_steps", validation_steps)
            if not isinstance(validation_split, (int, float)) or not 0 <= validation_split < 1:
                raise ValueError(f"validation_split must be a number in [0, 1), got {validation_split!r}")
            if validation_split and validation_data is None:
                if is_stream(x):
                    raise ValueError("validation_split needs arrays, but x is a generator or PyDataset: pass "
                                     "validation_data instead")
                x, y = self._prepare(x, y)
                split = len(x) - int(len(x) * validation_split)  # Keras: the last samples, before shuffling
                if split < 1 or split == len(x):
                    raise ValueError(f"validation_split={validation_split} leaves no training or no validation "
                                     f"samples out of {len(x)}")
                train = self._array_feed(x[:split], y[:split], batch_size, steps_per_epoch, shuffle)
                val = self._array_feed(x[split:], y[split:], batch_size, validation_steps, False,
                                       reserved=train.batches.device_bytes)
            else:
                train = self._feed(x, y, batch_size, steps_per_epoch, shuffle=shuffle)
                val = None
            if validation_data is not None:
                if is_stream(validation_data):
                    val_x, val_y = validation_data, None
                elif isinstance(validation_data, (tuple, list)) and len(validation_data) == 2:
                    val_x, val_y = validation_data
                else:
                    raise ValueError("validation_data must be a tuple (x_val, y_val), a generator or a PyDataset")
                reserved = train.batches.device_bytes if isinstance(train, ArrayFeed) else 0
                val = self._feed(val_x, val_y, batch_size, validation_steps, name="validation_data", reserved=reserved)
            reads = None  # told as each layer's gradients are enqueued (the distribution's reduction starts)
            if self.distribution is not None:  # each replica's shard of every batch, and the callbacks this process runs
                train, callbacks = self.distribution.prepare(self, train, list(callbacks or []))
                reads = self.distribution.gradient_reads(self)
            chief = self.distribution is None or self.distribution.chief  # shows the progress
            input_grads = self._needs_input_grad(False)
            steps = train.steps

            history = History()
            callbacks = CallbackList([*(callbacks or []), history], self,  # History last, as Keras: it sees what others add
                                     {"epochs": epochs, "steps": steps, "batch_size": batch_size, "verbose": verbose})
            self.stop_training = False
            watch_batches = callbacks.watch("on_batch_begin", "on_batch_end")
            callbacks.on_train_begin({})
            for epoch in range(initial_epoch, epochs):
                if train.exhausted:  # a generator read to its end in an earlier epoch
                    data.ran_out("x")
                    break
                callbacks.on_epoch_begin(epoch, {})
                started = time.perf_counter()
                seen = 0
                with tqdm(total=steps, desc=f"Epoch {epoch + 1}/{epochs}", unit="batch", file=sys.stderr,
                          disable=verbose != 1 or not chief, leave=True, dynamic_ncols=True) as bar:
                    refresh = max(1, steps // 10) if steps else UNKNOWN_STEPS_REFRESH
                    with closing(train.epoch(epoch)) as batches:
                        for step, (rows, xb, yb) in enumerate(batches):
                            if watch_batches:
                                callbacks.on_batch_begin(step, {"batch": step, "size": rows})
                            self._ensure_stats(seen + rows)
                            self._forward_loss(xb, yb, rows, seen, training=True)
                            self._backward(rows, input_grads, reads)
                            if self.distribution is not None:  # the other replicas' steps, the gradient reduction
                                self.distribution.synchronize(self)
                            self.optimizer.step()
                            # Hand the step to the device now: NVIDIA's driver holds enqueued kernels
                            # until a flush, so without one the device idled while Python queued
                            # the next step (1024-row MLP steps on the H100: 394 us, host + kernels).
                            self.rt.queue.flush()
                            seen += rows
                            if watch_batches:
                                callbacks.on_batch_end(step, {"batch": step, "size": rows})
                            bar.update(1)
                            if verbose == 1 and ((step + 1) % refresh == 0 or step + 1 == steps):
                                bar.set_postfix(self._train_logs(seen, running=True), refresh=False)
                    if not seen:
                        if epoch == initial_epoch:
                            raise ValueError("x (a generator) yielded no batches")
                        data.ran_out("x")
                        break
                    logs = self._train_logs(seen)
                    if val is not None:
                        logs.update(self._evaluate_feed(val, epoch, prefix="val_"))
                    bar.set_postfix(logs, refresh=False)
                self.epoch = epoch + 1
                if verbose == 2 and chief:
                    print(f"Epoch {epoch + 1}/{epochs} - {time.perf_counter() - started:.2f}s - " +
                          " - ".join(f"{k}: {v:.4f}" for k, v in logs.items()), file=sys.stderr)
                callbacks.on_epoch_end(epoch, logs)
                if self.stop_training:
                    break
            callbacks.on_train_end({})
            self.history = history
            return history
        finally:
            self._in_fit = False

    def _evaluate_feed(self, feed, epoch: int = 0, prefix: str = "") -> dict:
        seen = 0
        with closing(feed.epoch(epoch)) as batches:
            for rows, xb, yb in batches:
                self._ensure_stats(seen + rows)
                self._forward_loss(xb, yb, rows, seen)
                seen += rows
        if not seen:  # only a generator can give nothing
            raise ValueError(f"{feed.name} (a generator) yielded no batches in epoch {epoch + 1}; a generator "
                             "is read once: give a generator that does not end and steps, or a PyDataset")
        return self._logs(seen, prefix)

    def evaluate(self, x, y=None, batch_size=32, verbose=0, steps=None, return_dict: bool = False):
        """The mean loss (and accuracy, if compiled with it) over (x, y) or the batches of a
        generator / PyDataset (the first `steps` of them if given): loss or [loss, accuracy], or
        with `return_dict` a dict of them by name."""
        self._require_compiled("evaluate")
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        logs = self._evaluate_feed(self._feed(x, y, batch_size, _check_steps("steps", steps)))
        if verbose:
            print(" - ".join(f"{k}: {v:.4f}" for k, v in logs.items()), file=sys.stderr)
        return _returned(logs, return_dict)

    def predict(self, x, batch_size=32, verbose=0, steps=None) -> np.ndarray:
        """Outputs for the samples of x, or of the batches of a generator / PyDataset (each x,
        (x,) or (x, y)), in order."""
        batch_size = _check_int("batch_size", batch_size, minimum=1)
        feed = self._feed(x, None, batch_size, _check_steps("steps", steps), targets=False)
        shapes = [o.sample_shape for o in self._outputs]
        results = None if feed.samples is None else [np.empty((feed.samples, *shape), self.dtype) for shape in shapes]
        parts, seen = [], 0
        with closing(feed.epoch(0)) as batches:
            for rows, xb, _ in batches:
                part = ([np.empty((rows, *shape), self.dtype) for shape in shapes] if results is None
                        else [result[seen:seen + rows] for result in results])
                # Reads queue behind the kernels without waiting; finish() below waits for them all.
                for array, output in zip(part, self._forward(xb, rows)):
                    cl_runtime.cl.enqueue_copy(self.rt.queue, array.reshape(rows, -1), output.buffer, is_blocking=False)
                parts.append(part)
                seen += rows
        if not seen:
            raise ValueError("x (a generator) yielded no batches")
        self.rt.queue.finish()
        return self._structured(results if results is not None else [np.concatenate(p) for p in zip(*parts)])

    def _structured(self, arrays: list):
        """Per-output arrays in the structure the model's outputs were given in (Keras's)."""
        if self._output_structure == "single":
            return arrays[0]
        return dict(zip(self._output_names, arrays)) if self._output_structure == "dict" else arrays

    def train_on_batch(self, x, y=None, return_dict: bool = False):
        """One training step on all of (x, y), as Keras's: the batch's loss (and accuracy, if
        compiled with it), from the forward pass before the update; a dict with `return_dict`.
        Callbacks do not run, as in Keras."""
        self._require_compiled("train_on_batch")
        if self.distribution is not None:
            raise ValueError(f"train_on_batch runs one device's step, but model {self.name!r} was compiled "
                             f"with the distribution {type(self.distribution).__name__}, whose replicas would "
                             "fall out of step; use fit")
        rows, xb, yb = self._one_batch(x, y, targets=True)
        self._forward_loss(xb, yb, rows, 0, training=True)
        self._backward(rows, self._needs_input_grad(False))
        self.optimizer.step()
        return _returned(self._logs(rows), return_dict)

    def test_on_batch(self, x, y=None, return_dict: bool = False):
        """The loss (and accuracy) of all of (x, y) in inference mode, as Keras's."""
        self._require_compiled("test_on_batch")
        rows, xb, yb = self._one_batch(x, y, targets=True)
        self._forward_loss(xb, yb, rows, 0)
        return _returned(self._logs(rows), return_dict)

    def predict_on_batch(self, x) -> np.ndarray:
        """The outputs for all of x in one launch sequence, as Keras's."""
        rows, xb, _ = self._one_batch(x)
        arrays = [np.empty((rows, *o.sample_shape), self.dtype) for o in self._outputs]
        for array, output in zip(arrays, self._forward(xb, rows)):
            cl_runtime.cl.enqueue_copy(self.rt.queue, array.reshape(rows, -1), output.buffer)
        return self._structured(arrays)

    def _one_batch(self, x, y=None, targets: bool = False):
        """(rows, x batch, y batch or None): all of x (and, with `targets`, y), checked as fit checks
        them, on the device as one batch."""
        if not targets:
            x = self._prepare_x(x)
        elif y is None:
            raise ValueError("y (the targets) is required with an array x")
        else:
            x, y = self._prepare(x, y)
        rows = len(x)
        self._ensure_capacity(rows)
        if y is not None:
            self._ensure_stats(rows)
        return (rows, *Batches(self.rt, x, y, self.capacity, self.dtype, transposed=self._batch_transposed).batch(0, rows))

    def compute_gradients(self, x, y):
        """(loss, gradients in get_weights() layout, dL/dx) for one batch holding all of x, in
        training mode at the current step (the same Dropout masks each call; a non-trainable
        weight's gradient is zeros)."""
        self._require_compiled("compute_gradients")
        rows, xb, yb = self._one_batch(x, y, targets=True)
        self._forward_loss(xb, yb, rows, 0, training=True)
        input_grads = self._backward(rows, self._needs_input_grad(True))
        loss = self._logs(rows)["loss"]
        grads = []
        for layer in self._layers:
            grads.extend(layer.gradients())
        arrays = [g.numpy()[:rows].reshape(rows, *i.input_shape) for g, i in zip(input_grads, self._inputs)]
        return loss, grads, arrays[0] if len(arrays) == 1 else arrays

    # -- input checks and feeds ------------------------------------------------------------------
    def _feed(self, x, y, batch_size: int, steps: int | None, name: str = "", targets: bool = True,
              shuffle: bool = False, reserved: int = 0):
        """The batches of arrays (x, y), or of a generator / PyDataset x, as fit, evaluate and
        predict iterate them; `name` prefixes the arguments in errors (validation_data), and
        `reserved` bytes of the device budget are taken already (by the training data)."""
        names = (f"{name} x".strip(), f"{name} y".strip())
        if is_stream(x):
            if y is not None:
                kind = "generator" if isinstance(x, Iterator) else "PyDataset"
                raise ValueError(f"{name or 'x'} is a {kind}, which gives the targets in its (x, y) batches: "
                                 f"{names[1]} must not be passed, got {type(y).__name__}")

            def prepare(xb, yb, step):
                where = f" in batch {step}"
                if not targets:
                    return self._prepare_x(xb, names[0] + where), None
                return self._prepare(xb, yb, (names[0] + where, names[1] + where))

            stream = Stream(cl_runtime.runtime() if not self.built else self.rt, x, name or "x", prepare,
                            self._reserve, self.dtype, targets, steps, self.seed if shuffle else None,
                            lambda: self._batch_transposed)
            if not self.built:
                stream.peek()
            return stream
        if not targets:
            return self._array_feed(self._prepare_x(x, names[0]), None, batch_size, steps, shuffle, reserved)
        if y is None:
            raise ValueError(f"{names[1]} (the targets) is required when {names[0]} is an array; "
                             "or pass x as a generator or PyDataset of (x, y) batches")
        return self._array_feed(*self._prepare(x, y, names), batch_size, steps, shuffle, reserved)

    def _array_feed(self, x, y, batch_size, steps, shuffle, reserved=0) -> ArrayFeed:
        """Batches of prepared arrays: x (samples, features), y (samples, outputs) or None."""
        capacity = self._reserve(min(batch_size, len(x)))
        budget = data.device_budget(self.rt) - reserved
        if y is not None:
            self._ensure_stats(len(x))
        return ArrayFeed(Batches(self.rt, x, y, capacity, self.dtype, budget, self._batch_transposed), batch_size,
                         steps, self.seed if shuffle else None, self._reserve)

    def _reserve(self, rows: int) -> int:
        """Buffers for batches of `rows`; the capacity every batch tensor must have (the first
        layer reads x^T with that leading dimension)."""
        self._ensure_capacity(rows)
        return self.capacity

    def _require_compiled(self, what: str) -> None:
        if not self.compiled:
            raise NotCompiledError(f"call compile(optimizer, loss) before {what}()")

    def _prepare_x(self, x, name: str = "x") -> np.ndarray:
        """x checked and viewed as (samples, features), still in its own dtype: a memmap is not read.
        A model of several inputs takes a list of arrays, one per input, and gets their features
        side by side (a copy)."""
        if len(self._inputs) > 1:
            names = [i.name for i in self._inputs]
            pairs = _by_name(x, names, name, "input")
            labels = [f"{name}[{key!r}] (input {n!r})" for (key, _), n in zip(pairs, names)]
            arrays = [_batch(part, label) for (_, part), label in zip(pairs, labels)]
            self._meet_shapes([a.shape[1:] for a in arrays], labels)
            parts = [self._prepare_one(a, label, source.input_shape, source)
                     for a, label, source in zip(arrays, labels, self._inputs)]
            if len({len(p) for p in parts}) > 1:
                raise ValueError(f"the arrays of {name} have {[len(p) for p in parts]} samples; they must match")
            return np.concatenate(parts, axis=1)
        if isinstance(x, (list, tuple)) and len(x) == 1 and not np.isscalar(x[0]):
            x = x[0]  # Keras takes [x] for a model of one input
        elif isinstance(x, dict) and self._inputs and list(x) == [self._inputs[0].name]:
            x = x[self._inputs[0].name]
        x = _batch(x, name)
        self._meet_shapes([x.shape[1:]], [name])
        return self._prepare_one(x, name, self.input_shape)

    def _meet_shapes(self, shapes: list[tuple], labels: list[str]) -> None:
        """Build for the data's sample shapes: a model not built yet (a subclassed model is traced
        on them), and one whose Inputs have lengths of None, made again on the data's lengths
        whenever they change (outside fit, whose batches must keep theirs)."""
        if self._pattern is None:
            if not self.built:
                self.build(shapes[0] if len(shapes) == 1 else shapes)
            return
        shapes = [tuple(s) for s in shapes]
        for shape, source, label in zip(shapes, self._pattern["inputs"], labels):
            if not _fits(shape, source.input_shape):
                raise ValueError(f"{label} has samples of shape {shape}, but input {source.name!r} takes "
                                 f"samples of shape {source.input_shape} (None: any length)")
        if self._in_fit:  # the first data of a fit sets its lengths
            if self._fit_shapes is not None and shapes != self._fit_shapes:
                raise ValueError(f"{', '.join(labels)} has samples of shape {shapes}, but this fit runs on "
                                 f"{self._fit_shapes}: within one fit (its validation data too) every batch must "
                                 "have the same lengths; pad them to one length")
            self._fit_shapes = shapes
        if self.built and shapes == [i.input_shape for i in self._inputs]:
            return
        self._instantiate(shapes)
        self.build()

    def _prepare_one(self, x, name: str, expected, source: Input | None = None) -> np.ndarray:
        if expected is not None and tuple(x.shape[1:]) != tuple(expected):
            raise ValueError(f"{name} has shape {x.shape}, but the model's first layer expects samples of "
                             f"shape {tuple(expected)}")
        source = source or self._inputs[0]
        for layer in {id(c.layer): c.layer for c in self._calls if any(t is source.output for t in c.inputs)}.values():
            layer.check_input(x, name)  # e.g. Embedding's ids, before any launch
        return x.reshape(len(x), -1)

    def _prepare(self, x, y, names=("x", "y")):
        x = self._prepare_x(x, names[0])
        if len(self._heads) == 1:
            if isinstance(y, (list, tuple)) and len(y) == 1 and not np.isscalar(y[0]):
                y = y[0]  # Keras takes [y] for a model of one output
            y = self._heads[0].loss.prepare_targets(y, self._heads[0].shape, self.dtype, names[1])
        else:  # each output's targets by its loss, side by side
            parts = [head.loss.prepare_targets(part, head.shape, self.dtype, f"{names[1]}[{key!r}] (output {head.name!r})")
                     for head, (key, part) in zip(self._heads, _by_name(y, self.output_names, names[1], "output"))]
            if len({len(p) for p in parts}) > 1:
                raise ValueError(f"the arrays of {names[1]} have {[len(p) for p in parts]} samples; they must match")
            y = np.concatenate(parts, axis=1)
        if len(x) != len(y):
            raise ValueError(f"{names[0]} has {len(x)} samples but {names[1]} has {len(y)}; they must match")
        return x, np.ascontiguousarray(y)

    # -- weights, config, summary --------------------------------------------------------------
    def _require_built(self, what: str) -> None:
        if not self.built:
            raise NotBuiltError(
                f"model {self.name!r} is not built yet, so {what}() has nothing to work on: start it with "
                "Input(shape) (or give its first layer input_shape=), or call build(input_shape) first")

    def get_weights(self) -> list[np.ndarray]:
        self._require_built("get_weights")
        return [w for layer in self._layers for w in layer.get_weights()]

    def set_weights(self, weights) -> None:
        self._require_built("set_weights")
        weights = list(weights)
        expected = sum(len(layer.get_weights()) for layer in self._layers)
        if len(weights) != expected:
            raise ValueError(f"set_weights expects {expected} arrays, got {len(weights)}")
        for layer in self._layers:
            count = len(layer.get_weights())
            layer.set_weights(weights[:count])
            weights = weights[count:]

    def save(self, path) -> None:
        """Everything needed to resume training, in one HDF5 file (see docs/checkpoint-format.md)."""
        from .saving import save_model
        save_model(self, path)

    def save_weights(self, path) -> None:
        from .saving import save_weights
        save_weights(self, path)

    def load_weights(self, path) -> None:
        from .saving import load_weights
        load_weights(self, path)

    def export(self, filepath, format: str = "onnx", **kwargs) -> None:
        """Write the model for inference elsewhere, as Keras 3's export: format "onnx" (the only one)
        takes clnet.onnx.export's `opset` and `batch`."""
        if format != "onnx":
            raise ValueError(f"unknown export format {format!r}; expected 'onnx'")
        from .onnx import export
        export(self, filepath, **kwargs)

    def get_layer(self, name: str | None = None, index: int | None = None) -> Layer:
        """The layer called `name`, or at `index` in `layers`, as Keras's get_layer."""
        if name is not None and index is not None:
            raise ValueError(f"Provide only a layer name or a layer index, got index={index!r} and name={name!r}")
        if index is not None:
            if not isinstance(index, (int, np.integer)) or not -len(self.layers) <= index < len(self.layers):
                raise ValueError(f"get_layer: index {index!r} is not a position in model {self.name!r}, "
                                 f"which has {len(self.layers)} layers")
            return self.layers[index]
        if name is not None:
            for layer in self.layers:
                if layer.name == name:
                    return layer
            raise ValueError(f"No such layer: {name!r}. Existing layers are: {[l.name for l in self.layers]}")
        raise ValueError("Provide either a layer name or a layer index to get_layer")

    def count_params(self) -> int:
        self._require_built("count_params")
        return sum(layer.count_params() for layer in self._layers)

    def get_config(self) -> dict:
        """The layers and, per call in the order made, which layer ran on which tensors; a tensor is
        [layer index, k]: the output of that layer's k-th call (an Input's own tensor is k = 0), or
        [layer index, k, j]: its j-th output, j > 0 (a recurrent layer's states)."""
        # A model of lengths None is saved as given (its Inputs with None), not as made on data.
        graph = self._pattern or {"inputs": self._inputs, "calls": self._calls, "outputs": self._outputs,
                                  "layers": self._layers}
        position = {id(l): i for i, l in enumerate(graph["layers"])}
        refs = {id(i.output): [position[id(i)], 0] for i in graph["inputs"]}
        made: dict[int, int] = {}
        calls = []
        for call in graph["calls"]:
            k = made.get(id(call.layer), 0)
            made[id(call.layer)] = k + 1
            calls.append({"layer": position[id(call.layer)], "inputs": [refs[id(t)] for t in call.inputs]})
            refs.update({id(t): [position[id(call.layer)], k] + ([t.index] if t.index else []) for t in call.outputs})
        return {"class_name": "Model", "name": self.name, "floatx": self.dtype.name, "seed": self.seed,
                "layers": [_layer_config(l) for l in graph["layers"]], "calls": calls,
                "inputs": [position[id(i)] for i in graph["inputs"]], **self._outputs_config(refs, graph["outputs"]),
                # The lengths it was last made on, which its weights (and optimizer) were built for.
                **({"built_on": [list(i.input_shape) for i in self._inputs]} if self._pattern and self.built else {})}

    def _outputs_config(self, refs: dict, outputs: list) -> dict:
        """A model of one output keeps the one-output form ("output"), which older files have."""
        if self._output_structure == "single":
            return {"output": refs[id(outputs[0])]}
        return {"outputs": [refs[id(o)] for o in outputs],
                **({"output_names": self._output_names} if self._output_structure == "dict" else {})}

    @classmethod
    def from_config(cls, config: dict, floatx: str | None = None, custom_objects: dict | None = None) -> "Model":
        """The model get_config describes; `custom_objects` as Keras's: {name: class} of your layers."""
        register_custom_objects(custom_objects)
        layers = [_layer_from_config(entry) for entry in config["layers"]]
        outputs = {(i, 0): [l.output] for i, l in enumerate(layers) if isinstance(l, Input)}  # per call
        tensor = lambda ref: outputs[ref[0], ref[1]][ref[2] if len(ref) > 2 else 0]
        made: dict[int, int] = {}
        for call in config["calls"]:
            index = call["layer"]
            k = made.get(index, 0)
            made[index] = k + 1
            result = layers[index]([tensor(ref) for ref in call["inputs"]])
            outputs[index, k] = result if isinstance(result, list) else [result]
        if "output" in config:
            outputs = tensor(config["output"])
        else:
            outputs = [tensor(ref) for ref in config["outputs"]]
            if "output_names" in config:
                outputs = dict(zip(config["output_names"], outputs))
        model = cls([layers[i] for i in config["inputs"]], outputs, name=config["name"],
                    floatx=floatx or config["floatx"], seed=config["seed"])
        if "built_on" in config:
            model.build([tuple(shape) for shape in config["built_on"]])
        return model

    def summary(self, file=None) -> None:
        self._require_built("summary")
        file = file or sys.stdout
        device = self.rt.info
        graph = type(self) is not Sequential
        sources = {id(l): [] for l in self._layers}
        shapes = {}  # a layer of several outputs shows them all, as Keras
        for call in self._calls:
            # A call's later outputs (a recurrent layer's states) by their index: lstm[1], lstm[2].
            sources[id(call.layer)].extend(t.call.layer.name + (f"[{t.index}]" if t.index else "") for t in call.inputs)
            shapes.setdefault(id(call.layer), [t.shape for t in call.outputs])
        rows = self._layers if self._pattern else self.layers  # (as run, on the data's lengths)
        listed = {id(l): shapes.get(id(l), [(None, *l.output_shape)]) for l in rows}  # Inputs have no call
        shown = {key: str(shape[0] if len(shape) == 1 else shape) for key, shape in listed.items()}
        column = max([20, *(len(text) + 2 for text in shown.values())])  # Output shape
        width = 42 + column + 30 * graph
        print(f'Model "{self.name}"  ({self.dtype.name} on {device.name})', file=file)
        print(f"{'Layer (type)':<32}{'Output shape':<{column}}{'Params':>10}" + ("  Connected to" if graph else ""),
              file=file)
        print("=" * width, file=file)
        for layer in rows:  # a Sequential's Input has no row, as in Keras
            line = (f"{layer.name + ' (' + type(layer).__name__ + ')':<32}{shown[id(layer)]:<{column}}"
                    f"{layer.count_params():>10,}")
            print(line + (f"  {', '.join(sources[id(layer)])}" if graph else ""), file=file)
        print("=" * width, file=file)
        total = self.count_params()
        trainable = sum(w.size for layer in self._layers
                        for p, w in zip(layer.parameters, layer.get_weights()) if p.trainable)
        print(f"Total params: {total:,}", file=file)
        print(f"Trainable params: {trainable:,}", file=file)
        print(f"Non-trainable params: {total - trainable:,}", file=file)


class Sequential(Model):
    """A plain stack of layers: the graph engine over a chain of calls."""
    default_name = "sequential"

    def __init__(self, layers=None, name: str | None = None, floatx: str | None = None, seed: int | None = None):
        super().__init__(name=name, floatx=floatx, seed=seed)
        for layer in layers or []:
            self._append(layer)
        if self.input_shape is not None:  # Keras: a model that knows its input is built at once
            self.build(self.input_shape)

    @property
    def layers(self) -> list[Layer]:
        return [layer for layer in self._layers if not isinstance(layer, Input)]

    def add(self, layer: Layer) -> None:
        """Append a layer. A model that knows its input shape is rebuilt with the new layer at once,
        as Keras does; the layers it already had keep their weights."""
        if self.built and self.compiled and self.optimizer.iterations:
            raise RuntimeError(f"cannot add layers to model {self.name!r}: it has been trained, and its "
                               "optimizer state belongs to the layers it had; build a new model instead")
        self._append(layer)
        if self.input_shape is not None:
            try:
                self._chain(self.input_shape)
            except Exception:  # a layer that does not fit leaves the model as it was
                self._layers.pop()
                raise
            # Layers only this model reads are built again with the new one, keeping their
            # weights, so that all of them stay in one store (one update launch); layers that
            # another model reads keep their parameters where they are, and the new layer gets a
            # store of its own.
            private = self.built and self._whole_store is self._own_store and set(self._own_store.users) == {self}
            kept = [l.get_weights() for l in self._layers[:-1]] if private else []
            for l in self._layers[:-1] if private else ():
                l.built = False
            self.build(self.input_shape)
            for l, weights in zip(self._layers, kept):
                l.set_weights(weights)

    def _append(self, layer: Layer) -> None:
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add expects a Layer, got {type(layer).__name__}")
        if layer.multi_input:
            raise TypeError(f"{layer.describe()} merges several inputs, which a Sequential stack cannot give "
                            "it; use the functional API: Model(inputs, outputs)")
        if isinstance(layer, Input) and self._layers:
            raise ValueError(f"an Input can only be the first layer of a Sequential model; {self.name!r} "
                             f"already starts with {self._layers[0].describe()}")
        _name(layer, self._layers)
        self._layers.append(layer)

    def build(self, input_shape) -> None:
        """Build every layer for samples of `input_shape` (without the batch axis) on the current device."""
        self._inputs, self._calls, output = self._chain(input_shape)
        self._outputs, self._output_names, self._output_structure = [output], [output.call.layer.name], "single"
        super().build()

    def _chain(self, input_shape) -> tuple[list[Input], list[Call], KerasTensor]:
        """The stack as a graph: its Input, a call per layer, the last call's output."""
        if not self._layers:
            raise ValueError("the model has no layers; add some before building it")
        first = self._layers[0]
        source = first if isinstance(first, Input) else Input(input_shape)
        if tuple(input_shape) != source.input_shape:
            raise ValueError(f"model {self.name!r} starts with {first.describe()} of shape {source.input_shape}, "
                             f"cannot build it for samples of shape {tuple(input_shape)}")
        tensor, calls = source.output, []
        for layer in self._layers[1:] if source is first else self._layers:
            shapes = layer.compute_output_shapes(tensor.sample_shape)
            if len(shapes) > 1:
                raise ValueError(f"all layers in a Sequential model should have a single output tensor; "
                                 f"{layer.describe()} has {len(shapes)} (return_state=True): use the functional "
                                 "API, Model(inputs, outputs), for multi-output layers")
            calls.append(Call(layer, [tensor], shapes))
            tensor = calls[-1].output
        return [source], calls, tensor

    def get_config(self) -> dict:
        return {"name": self.name, "floatx": self.dtype.name, "seed": self.seed,
                "input_shape": None if not self.built else list(self._inputs[0].input_shape),
                "layers": [_layer_config(l) for l in self._layers]}

    @classmethod
    def from_config(cls, config: dict, floatx: str | None = None, custom_objects: dict | None = None) -> "Sequential":
        register_custom_objects(custom_objects)
        layers = [_layer_from_config(entry) for entry in config["layers"]]
        model = cls(layers, name=config["name"], floatx=floatx or config["floatx"], seed=config["seed"])
        if config.get("input_shape") is not None and not model.built:
            model.build(config["input_shape"])
        return model


def call_eagerly(layer: Layer, inputs, args=(), kwargs=None):
    """`layer(arrays)` outside a model, as Keras's eager call: the layer on Inputs of the arrays'
    sample shapes, a model of its own (made once per shapes, kept by the layer), run on all the
    rows at once. Returns numpy arrays in the structure the call gives. The layer is built by the
    first such model (its weights drawn then), and a model made of it later shares them."""
    if isinstance(inputs, (list, tuple)) and all(isinstance(v, (int, float)) for v in leaves_of(list(inputs))):
        inputs = np.asarray(inputs)  # a nested list of numbers is one array
    arrays = [np.asarray(a) for a in leaves_of(tensors_of(inputs))]
    for array in arrays:
        if array.ndim < 2:
            raise ValueError(f"{layer.describe()} was called on an array of shape {array.shape}; a layer computes "
                             "on a batch: axis 0 is the samples' (one sample: x[None])")
    key = (tuple(a.shape[1:] for a in arrays), repr(args), repr(sorted((kwargs or {}).items())))
    models = layer.__dict__.setdefault("_eager_models", {})
    if key not in models:
        sources = [Input(a.shape[1:]) for a in arrays]
        items = iter(sources)
        structure = _refilled(inputs, items)
        outputs = layer(structure, *args, **(kwargs or {}))
        # Keras computes in the layer's float type, whatever the arrays': one built already keeps its own.
        floatx = layer.dtype.name if layer.built and isinstance(getattr(layer, "dtype", None), np.dtype) else None
        models[key] = Model(sources if len(sources) > 1 else sources[0], outputs, floatx=floatx)
    return models[key].predict_on_batch([a for a in arrays] if len(arrays) > 1 else arrays[0])


def _refilled(structure, items):
    """`structure` (arrays in lists, tuples or dicts) with each array the next of `items`."""
    if isinstance(structure, dict):
        return {k: _refilled(v, items) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return type(structure)(_refilled(v, items) for v in structure)
    return next(items)


def model_from_config(config: dict, floatx: str | None = None) -> Model:
    """A Sequential or functional model from its get_config()."""
    return (Model if config.get("class_name") == "Model" else Sequential).from_config(config, floatx)


def _layer_config(layer: Layer) -> dict:
    return {"class_name": type(layer).__name__, "config": layer.get_config()}


def _layer_from_config(entry: dict) -> Layer:
    if entry["class_name"] not in Layer.registry:
        raise ValueError(f"unknown layer class {entry['class_name']!r}")
    return Layer.registry[entry["class_name"]].from_config(entry["config"])


def _name(layer: Layer, taken_by: list[Layer]) -> None:
    """Check that `layer`'s name is not another layer's of the model, as Keras: names find
    layers (get_layer), outputs and checkpoint groups."""
    other = next((l for l in taken_by if l.name == layer.name and l is not layer), None)
    if other is not None:
        raise ValueError(f"the name {layer.name!r} is used by two layers of the model, {other.describe()} and "
                         f"{type(layer).__name__}; all layer names of a model must be unique")


# The parameters each built layer declared, in the order its build declared them: what a later
# call's copy shares, in any model.
_declared: "weakref.WeakKeyDictionary[Layer, list]" = weakref.WeakKeyDictionary()


class _DeclaringStore:
    """The parameter store as a layer's first call builds against it, remembering what it declared."""

    def __init__(self, store: ParameterStore):
        self.store, self.declared = store, []

    def add(self, *args, **kwargs):
        parameter = self.store.add(*args, **kwargs)
        self.declared.append(parameter)
        return parameter

    def __getattr__(self, name):
        return getattr(self.store, name)


class _SharingStore(_DeclaringStore):
    """For a later call of a built layer: each parameter its copy declares is the owner's, in
    order, and of the owner's shape; a call on inputs that would need other weights raises."""

    def __init__(self, store: ParameterStore, owned: list, layer: Layer, shape):
        super().__init__(store)
        self._owned, self._layer, self._shape = iter(owned), layer, shape

    def add(self, initial, *args, **kwargs):
        owner = next(self._owned, None)
        if owner is None or owner.shape != np.shape(initial):
            layer = self._layer
            raise ValueError(f"{layer.describe()} was built for inputs of shape {layer.built_input_shape} and cannot "
                             f"be called on inputs of shape {self._shape}: its weights have other shapes (a layer "
                             "keeps the weights it was built with)")
        return self.store.share(owner)


class _Head:
    """One output as the loss sees it (Keras's per-output loss): its tensor and name, its loss,
    weight and metrics, and its loss kernel's buffers. `consumed`: a layer reads the output too,
    so its gradient is a sum, and its layer's activation stays out of the loss."""

    def __init__(self, rt, dtype, tensor: KerasTensor, name: str, consumed: bool):
        self.rt, self.dtype, self.tensor, self.name, self.consumed = rt, dtype, tensor, name, consumed
        self.shape = tensor.sample_shape
        self.positions = int(np.prod(self.shape[:-1]))  # time steps, or 1
        # The loss kernel's work-groups (Runtime.row_group: a power of two of at most 64 items),
        # enough per sample for its positions; each writes its share of the sample's loss.
        self.group = rt.row_group(self.positions)
        self.blocks = -(-self.positions // self.group)  # work-groups per sample

    def compile(self, loss, weight: float, metrics: list[str]) -> None:
        rt, dtype, layer = self.rt, self.dtype, self.tensor.call.layer
        self.loss, self.weight, self.metrics = loss, weight, metrics
        self.width = loss.target_width(self.shape)  # its targets' columns in a batch
        self.fold = self.tensor.index == 0 and not self.consumed and loss.can_fold(layer.output_activation)
        # fit and evaluate read the output only through the loss: an output layer whose softmax
        # the loss folds may leave the softmax to the loss kernel (see Model._forward_loss).
        self.softmax_in_loss = self.fold and loss.folds == "softmax" and hasattr(layer, "forward_logits")
        self._kernel = rt.kernel(loss.program(rt, dtype), "CalcOutputGradient", dtype)
        self._reduce = rt.kernel(loss.program(rt, dtype), "ReduceMetrics", dtype)
        self._totals = Tensor((2,), dtype, rt)
        self.output_grad = self.target = None
        self.stats = None  # (per-sample loss, per-sample hits), in the kernel's blocks per sample

    def ensure_rows(self, rows: int, split_targets: bool) -> None:
        if self.output_grad is None or self.output_grad.shape[0] < rows:
            self.output_grad = Tensor((rows, *self.shape), self.dtype, self.rt)
            # A model of several outputs copies each one's targets out of the batch's.
            self.target = Tensor((rows, self.width), self.dtype, self.rt) if split_targets else None

    def grow_stats(self, samples: int, kept: int) -> None:
        """Room for `samples`, with a device-side copy of the first `kept` samples' numbers."""
        grown = tuple(Tensor((samples * self.blocks,), self.dtype, self.rt) for _ in range(2))
        if kept:
            for old, new in zip(self.stats, grown):
                cl_runtime.cl.enqueue_copy(self.rt.queue, new.buffer, old.buffer, byte_count=kept * self.blocks * old.dtype.itemsize)
        self.stats = grown

    def launch(self, target: Tensor, output: Tensor, rows: int, first: int) -> None:
        """The output's gradient (scaled by its loss weight) and the per-sample loss and hits of
        rows [first, first + rows). As in Keras the last axis is what a loss compares (the
        classes), averaged over the other axes (time). Where the loss takes the output layer's
        softmax, `output` is the softmax's input: one launch fewer per step (~9 us of host time
        on the H100, where small batches are launch-bound)."""
        self._kernel((rows * self.blocks * self.group,), (self.group,), target, output, self.output_grad,
                     *self.stats, first, self.positions, self.blocks, self.shape[-1], self.loss.mode,
                     SOFTMAX_HERE if self.softmax_in_loss else int(self.fold),
                     self.weight / (rows * self.positions))

    def totals(self, count: int) -> tuple[float, float]:
        """Sum of per-sample loss and accuracy over [0, count)."""
        size = self.rt.local_size
        self._reduce((size,), (size,), *self.stats, count * self.blocks, self._totals)
        loss, hits = self._totals.numpy()
        return float(loss), float(hits)


def _several(input_shape) -> bool:
    """Whether build's `input_shape` is a list of shapes, one per input."""
    return isinstance(input_shape, list) and bool(input_shape) and isinstance(input_shape[0], (list, tuple))


def _batch(x, name: str) -> np.ndarray:
    """x checked (numbers, finite) as a batch: a first axis of at least one sample."""
    x = checked(x, name)
    if x.ndim < 2 or len(x) == 0:
        raise ValueError(f"{name} must have a batch axis and at least one sample, got shape {x.shape}")
    return x


def _fits(shape, pattern) -> bool:
    """Whether a sample shape is one of `pattern`'s (None there: any extent)."""
    return len(shape) == len(pattern) and all(p is None or p == s for s, p in zip(shape, pattern))


def _replayed(graph: dict, made: dict) -> list[KerasTensor]:
    """The outputs of `graph` (inputs, calls, outputs) with each call made again on the tensors
    `made` gives its inputs (id of the graph's tensor -> the new one), sharing the layers."""
    for call in graph["calls"]:  # as from_config: each layer on the list of its inputs
        result = call.layer([made[id(t)] for t in call.inputs])
        made.update(zip(map(id, call.outputs), result if isinstance(result, list) else [result]))
    return [made[id(o)] for o in graph["outputs"]]


def _rows(call: Call, rows: int) -> int:
    """The rows a call computes: the batch's, or one for a call without a batch axis (of weights
    and constants alone, the same for every sample)."""
    return rows if call.outputs[0].batched else 1


def _output_name(tensor: KerasTensor, taken: set) -> str:
    """An output's name, as Keras's: its layer's, made unique (a recurrent layer's states follow
    its output: lstm, lstm_1, lstm_2)."""
    base = tensor.call.layer.name
    name = base if base not in taken else next(f"{base}_{i}" for i in range(1, len(taken) + 2)
                                               if f"{base}_{i}" not in taken)
    taken.add(name)
    return name


def _by_name(value, names: list[str], argument: str, what: str) -> list[tuple]:
    """(key, item) per name of `value`, a list in order or a dict by name, as Keras takes a
    model's several inputs or outputs."""
    if isinstance(value, dict):
        unknown = [k for k in value if k not in names]
        missing = [n for n in names if n not in value]
        if unknown or missing:
            raise ValueError(f"{argument} is a dict by {what} name; the model's {what}s are {names}, got keys "
                             f"{list(value)}" + (f" ({unknown} unknown)" if unknown else "")
                             + (f" ({missing} missing)" if missing else ""))
        return [(n, value[n]) for n in names]
    if not isinstance(value, (list, tuple)) or len(value) != len(names):
        raise ValueError(f"{argument} must be a list of {len(names)} arrays, one per {what} {names}, or a dict by "
                         f"{what} name, got {type(value).__name__}"
                         + (f" of {len(value)}" if isinstance(value, (list, tuple)) else ""))
    return list(enumerate(value))


def _per_output(value, names: list[str], argument: str, check, listed: bool = True) -> list:
    """compile's `value` for each output, as Keras reads it: a dict by output name, a list in
    output order (where `listed`), or one value for all."""
    if isinstance(value, dict):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ValueError(f"{argument} names {unknown}, which are not outputs of the model; its outputs are {names}")
        return [check(value.get(n), f"{argument}[{n!r}]") for n in names]
    if listed and isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise ValueError(f"{argument} must have one entry per output {names}, got {len(value)}: {value!r}")
        return [check(v, f"{argument}[{i}]") for i, v in enumerate(value)]
    return [check(value, argument) for _ in names]


def _loss(value, argument: str):
    if value is None:
        raise ValueError(f"{argument} is None: every output of a clnet model needs a loss")
    return losses.get(value)


def _loss_weight(value, argument: str) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{argument} must be a non-negative number, got {value!r}")
    return float(value)


def _metric_names(metrics, argument: str) -> list[str]:
    metrics = [] if metrics is None else [metrics] if isinstance(metrics, str) else list(metrics)
    for metric in metrics:
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r} in {argument}; expected one of {sorted(METRICS)}")
    return sorted({METRICS[m] for m in metrics})


def _returned(logs: dict, return_dict: bool):
    """What evaluate and the *_on_batch methods return, as Keras: the logs, or their values in
    order (the loss alone when it is the only one)."""
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def _check_steps(argument: str, value) -> int | None:
    return None if value is None else _check_int(argument, value, minimum=1)


def _check_int(argument: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{argument} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    return int(value)
