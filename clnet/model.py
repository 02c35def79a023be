"""Model and Sequential: a graph of layer calls, built on the device; as Keras's Model, also
compiled (step.py, the compiled step) and trained (trainer.py, the fit loop).

Three units, one class: this file makes the graph (inputs, calls, outputs; naming, checks,
tracing a subclass, lengths of None, nested models), builds it (each layer once: its runner,
parameter stores, which layers write y^T), and describes it (config, weights, summary). Step
(step.py) takes the built graph's runs and compiles the step: losses, the optimizer, forward
and backward, train_step/test_step/predict_step. Trainer (trainer.py) feeds data to the step:
fit, evaluate, predict and their callbacks. The units meet in public methods: the graph gives
`runs`, `prepare_inputs`, `ensure_built`, `outputs_as_given`; the step `train_step`,
`test_step`, `predict_step`, `compute_loss`, `backward`, `reserve`, `prepare_targets`."""
from __future__ import annotations

import copy
import inspect
import sys
import weakref

import numpy as np

from . import dtype_policies, ops
from .cl import runtime as cl_runtime
from .cl.parameters import ParameterStore, parameter_ranges
from .data import KeptData, checked
from .products import tensor_core_form
from .layers import Input, Layer
from .layers.base import (Call, HasWeights, KerasTensor, ModelMode, check_call_arguments, has_lengths, input_mask,
                          is_concrete, leaves_of, masked_call, register_custom_objects, tensors_of, trace_scope,
                          tracing)
from .step import NotCompiledError, Step, by_name  # noqa: F401 (clnet.model.NotCompiledError too)
from .trainer import Trainer, check_int

_global_seed: int | None = None


def set_seed(seed: int) -> None:
    """Seed for models created afterwards: their weight initialisation, dropout masks and shuffling
    repeat exactly. `seed` is a non-negative integer; a model's own `seed=` argument takes
    precedence. `clnet.utils.set_random_seed` sets this together with Python's and numpy's
    generators."""
    global _global_seed
    _global_seed = check_int("seed", seed, minimum=0)


class NotBuiltError(ValueError, RuntimeError):
    """The model does not know its input shape yet, so it has no weights: `get_weights`,
    `set_weights`, `count_params` or `summary` on a model that has not met data (a Sequential
    without an `Input` or `input_shape`, a model whose Inputs have lengths of None, a subclassed
    model), or a subclassed model's `build()` without a shape. `build(input_shape)`, `fit` or
    `predict` builds it. A ValueError and a RuntimeError, so either `except` catches it."""


class Model(Trainer, Step, HasWeights):
    """A graph of layer calls from one or more `Input`s to its outputs, trained on the device, as
    Keras's functional `Model(inputs, outputs)`.

    `x = Input((8,)); h = Dense(8, "relu")(x); y = Dense(1)(Add()([x, h])); Model(x, y)`. Every
    training step runs the calls in the order they were made (a topological order), then their
    backward passes in reverse; a tensor read by several calls gets the sum of their gradients, and
    a layer called twice shares its weights (its extra calls run as copies whose gradients are added
    into the owner's). A call may give several tensors (a recurrent layer's final states), each read
    on its own. `Sequential` is this engine over a chain.

    - `inputs`: an `Input` (or its output tensor) or a list of them; every input must reach an
      output.
    - `outputs`: one output tensor, a list, or a dict of them by name (Keras's structures: `predict`
      gives back the same structure, and losses, loss weights and targets follow it); each computed
      from the inputs.
    - `name=None`: the model's name (default `"model"`).
    - `floatx=None`: `"float32"` or `"float64"`, the type its weights and computations are in; by
      default the global dtype policy's variables' type (`clnet.floatx()` until
      `clnet.mixed_precision.set_global_policy` sets one; for a model of layers built already,
      theirs). A layer given `dtype=` of float32 or float64 variables must agree; 16-bit policies
      compute in float32 with a warning (clnet/dtype_policies.py). `dtype_policy` is Keras's: the
      global policy when the model was made, or `floatx`'s.
    - `seed=None`: a non-negative integer that fixes weight initialisation, dropout and shuffling;
      by default `clnet.set_seed`'s, else a fresh one.

    A subclass that defines `call()` (and calls `super().__init__()` with no graph) is traced on
    `Input`s of its first data's shape, or of `build(input_shape)`, as Keras's subclassed models
    are, and saves as the graph it traced. The model is built (its weights made on the device) when
    it is made, or, where an Input has lengths of None, on its first data."""

    def __init__(self, inputs=None, outputs=None, name: str | None = None, floatx: str | None = None,
                 seed: int | None = None):
        self.name = name or self.default_name
        self.dtype = cl_runtime.floatx_dtype(floatx or dtype_policies.default_floatx())
        self.dtype_policy = dtype_policies.policy_of(floatx)
        self._floatx_given = floatx is not None  # else a model of layers built already takes their type
        if seed is None:
            seed = _global_seed if _global_seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.seed = check_int("seed", seed, minimum=0)
        self._layers: list[Layer] = []
        self._inputs: list[Input] = []  # (a subclassed model's: traced on its first data)
        self._outputs: list[KerasTensor] = []
        self.built = False
        self.compiled = False
        self.stop_training = False
        self.stop_evaluating = False  # set by a callback: evaluate (predict) ends after this batch
        self.stop_predicting = False
        self.epoch = 0  # epochs completed, for checkpoints
        self.data_epoch = 0  # the data order of the next epoch fit trains (see Trainer.fit)
        self.kept_data = KeptData()  # the device copies of arrays given before (Trainer.forget_data)
        self.distribution = None  # a clnet.distribute strategy, set by compile
        # The graph as given, where an Input has lengths of None (Input((None, 8))): the model runs
        # it made again on each data's lengths (_instantiate), sharing its layers.
        self._pattern: dict | None = None
        self._instantiations: dict[tuple, dict] = {}  # other lengths' (see ensure_built), oldest first
        if type(self) is Model:
            self._set_graph(inputs, outputs)
            if has_lengths([i.input_shape for i in self._inputs]):
                self._pattern = self._graph_as_made()
            self.build()

    default_name = "model"
    _mask_calls: list = []  # calls that only make masks (see _set_graph); a Sequential's chain has none

    # -- the graph -----------------------------------------------------------------------------
    def _graph_as_made(self) -> dict:
        """The graph this model holds now: its inputs, calls, outputs and layers."""
        return {"inputs": self._inputs, "calls": self._calls, "outputs": self._outputs, "layers": self._layers}

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
                stack.extend(t.call for t in call.given_inputs)
        # ... and those that only make the masks its layers and losses read (ops combining two
        # masks, a MultiHeadAttention's padding mask): they run, and the graph as given (config,
        # layers, export) leaves them out, as the layers that make them make them again.
        self._mask_calls, stack = [], [c.mask.call for c in calls if c.mask is not None]
        stack += [c.inputs[i].call for c in calls for i in c.derived_inputs]
        stack += [o._keras_mask.call for o in outputs if o._keras_mask is not None]
        while stack:
            call = stack.pop()
            if id(call) not in seen:
                seen.add(id(call))
                self._mask_calls.append(call)
                stack.extend(t.call for t in call.inputs)
        self._mask_calls.sort(key=lambda c: c.number)
        calls.sort(key=lambda c: c.number)
        reached = [c.layer for c in calls + self._mask_calls if isinstance(c.layer, Input)]
        self._mask_calls = [c for c in self._mask_calls if not isinstance(c.layer, Input)]
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
        graph = self._pattern or self._graph_as_made()
        names = [i.name for i in graph["inputs"]]
        pairs = (by_name(given, names, "inputs", "input") if len(names) > 1 or isinstance(given, dict)
                 else [(0, given[0] if isinstance(given, (list, tuple)) and len(given) == 1 else given)])
        made = {}
        for (_, tensor), source in zip(pairs, graph["inputs"]):
            if not isinstance(tensor, KerasTensor) or not _fits(tensor.sample_shape, source.input_shape):
                raise ValueError(f"model {self.name!r} input {source.name!r} takes tensors of shape "
                                 f"{source.output.shape}, got {getattr(tensor, 'shape', tensor)!r}")
            made[id(source.output)] = tensor
        return self.outputs_as_given(_replayed(graph, made))

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
    def built_layers(self) -> list[Layer]:
        """Every layer of the graph as built, each once, its Inputs first (a Sequential's too):
        what a checkpoint stores, in this order."""
        return list(self._layers)

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
        return self.outputs_as_given(self.outputs)

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

    def _check_policies(self) -> None:
        """Its layers' dtype policies against its one float type: a layer given float32 or float64
        variables of the other type is refused; layers asking for 16-bit computations are named
        in a PrecisionFallbackWarning, once per model (they compute in its float type)."""
        sixteen = {}
        for layer in self._layers:
            if layer.is_input:
                continue
            policy = layer.dtype_policy
            if policy.compute_dtype in dtype_policies.SIXTEEN_BITS:
                sixteen[layer.name] = policy
            elif layer.dtype_given and policy.variable_dtype != self.dtype.name:
                raise ValueError(f"{layer.describe()} was given dtype={policy.name!r}, but model {self.name!r} "
                                 f"computes in {self.dtype.name}: clnet computes a model in one float type; give "
                                 f"the model floatx={policy.variable_dtype!r}, or the layer the model's type")
        if not self.__dict__.get("_warned_sixteen_bits"):
            dtype_policies.warn_sixteen_bits(self.name, sixteen, self.rt.info.name,
                                             self.dtype == np.float32 and tensor_core_form(self.rt, self.dtype))
            self._warned_sixteen_bits = bool(sixteen)

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
        self._check_policies()
        self.rt.check_dtype(self.dtype)
        store = ParameterStore(self.rt, self.dtype)  # for the layers this model builds
        index = {id(layer): i for i, layer in enumerate(self._layers)}
        for layer in self._inputs:
            layer.build(layer.input_shape, store, None)
        owned: dict[int, list] = {}   # layer -> the parameters its build declared, in order
        # (layer or its copy, call) in call order: what the step runs (public: a distribution
        # plans its gradient hand-over along it)
        self.runs = []
        fresh = set()                 # the layers (and copies) this build made
        # What runs: the graph's calls, each chain of elementwise ops one generated kernel (a
        # layer of its own, made here; the graph, self._calls, stays as made).
        masks = [c.mask for c in self._calls if c.mask is not None]
        masks += [o._keras_mask for o in self._outputs if o._keras_mask is not None]
        runs = ops.fuse_elementwise(sorted(self._calls + self._mask_calls, key=lambda c: c.number),
                                    [*self._outputs, *masks])
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
                # Where the layer's first call here is such a copy, the layer itself never runs in
                # this model (made again on other lengths): its gradient is the copies' alone.
                replaces = id(layer) not in owned
                owned.setdefault(id(layer), _declared[layer])
                runner = copy.copy(layer)
                runner.allocated_rows = 0  # (its own batch buffers, made by allocate)
                runner.build(shape, _SharingStore(store, owned[id(layer)], layer, shape, replaces),
                             np.random.default_rng(0))
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
            self.runs.append((runner, call))
        # Which layers write y^T as well as y: those a layer reading x^T reads (a view, such as
        # Flatten, passes on its input's y^T, so it reads x^T where a layer above it does). A
        # layer another model built keeps writing its y^T where that model's readers need it.
        producers = {id(t): runner for runner, call in self.runs for t in call.outputs}
        for runner, _ in self.runs:
            if id(runner) in fresh:
                runner.writes_transposed = False
        for runner, call in reversed(self.runs):  # the readers of a call's output come after it
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
        self.batch_transposed = any(runner.reads_transposed and any(t is first for t in call.inputs)
                                     for runner, call in self.runs)
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
        self._parameters = parameters
        self._ranges = parameter_ranges(parameters, self._frozen())
        self._trainability_stale = False
        for s in [store, *(p.store for p in parameters)]:
            s.users.add(self)
        shapes = [o.sample_shape for o in self._outputs]
        self.output_shape = shapes[0] if len(shapes) == 1 else shapes
        self.built = True
        self._plan()  # (Step: what the step needs of this graph)

    def _frozen(self) -> set[int]:
        """The parameters of the layers set trainable = False (as ids)."""
        return {id(p) for layer in self._layers if not layer.trainable for p in _declared.get(layer, ())}

    def held_layers(self) -> list:
        """Its layers (as given, as built, and the copies its steps run): what `trainable` sets."""
        given = self._pattern["layers"] if self._pattern else []
        runners = [runner for runner, _ in getattr(self, "runs", ())]
        return list({id(layer): layer for layer in [*given, *self._layers, *runners]}.values())

    def trainability_changed(self) -> None:
        """A layer of this model was set trainable or not: the next training step trains what is
        trainable then (apply_trainability)."""
        self._trainability_stale = True

    def apply_trainability(self) -> None:
        """The optimizer's ranges made again over the parameters of the layers trainable now (the
        moments of those it trained before kept, see Optimizer.bind), each copy a step runs set as
        its layer, and the backward plans made again (a frozen layer's weight gradients are not
        needed where nothing below it trains). The training step calls it when a layer changed."""
        self._trainability_stale = False
        if not self.built:
            return
        frozen = self._frozen()
        if self.distribution is not None and frozen:
            raise ValueError(f"{type(self.distribution).__name__} trains every trainable weight, but a layer of "
                             f"model {self.name!r} was set trainable = False while it trains under it")
        for runner, call in self.runs:
            if runner is not call.layer:
                runner.follow_trainability(call.layer)
        self._ranges = parameter_ranges(self._parameters, frozen)
        self._grad_plans = {}
        self.forget_instantiations()
        if self.compiled:
            self._bind_optimizer()

    @property
    def store(self) -> ParameterStore:
        """The parameter store holding exactly this model's parameters, flat (see
        cl/parameters.py): a model that built all of its layers has one."""
        if self._whole_store is None:
            raise ValueError(f"model {self.name!r} has layers whose weights another model built and keeps in its "
                             "own parameter store, so its parameters are not one flat store; this needs a model "
                             "that built all of its layers")
        return self._whole_store

    def outputs_as_given(self, arrays: list):
        """Per-output arrays (or tensors) in the structure the model's outputs were given in: one,
        a list, or a dict by output name, as Keras's predict returns them."""
        if self._output_structure == "single":
            return arrays[0]
        return dict(zip(self._output_names, arrays)) if self._output_structure == "dict" else arrays

    def ensure_built(self, shapes: list[tuple], labels: list[str]) -> None:
        """Build for the data's sample `shapes` (one per input; `labels` name them in errors): a
        model not built yet (a subclassed model is traced on them), and one whose Inputs have
        lengths of None, made again on the data's lengths whenever they change, batch by batch
        within a fit too (the same layers and weights; the optimizer's moments and the epoch's
        per-sample numbers and metrics go on). The feeds call it."""
        if self._pattern is None:
            if not self.built:
                self.build(shapes[0] if len(shapes) == 1 else shapes)
            return
        shapes = [tuple(s) for s in shapes]
        for shape, source, label in zip(shapes, self._pattern["inputs"], labels):
            if not _fits(shape, source.input_shape):
                raise ValueError(f"{label} has samples of shape {shape}, but input {source.name!r} takes "
                                 f"samples of shape {source.input_shape} (None: any length)")
        current = self.built_shapes
        if current == shapes:
            return
        if current is not None:  # kept as it is, buffers and all, for its lengths' next batch
            self._instantiations[tuple(current)] = {a: self.__dict__[a] for a in INSTANTIATION if a in self.__dict__}
        kept = self._instantiations.pop(tuple(shapes), None)
        if kept is None:
            self._instantiate(shapes)
            self.build()
        else:
            for attribute in INSTANTIATION:
                if attribute in kept:
                    self.__dict__[attribute] = kept[attribute]
                else:
                    self.__dict__.pop(attribute, None)
            self.rebind_heads()
        while len(self._instantiations) >= KEPT_INSTANTIATIONS:  # the longest unused goes
            self._instantiations.pop(next(iter(self._instantiations)))

    def forget_instantiations(self) -> None:
        """Drop the instantiations kept for other lengths (they are made again when data of their
        lengths comes): compile and a change of trainability call it, which the kept ones missed."""
        self._instantiations = {}

    @property
    def built_shapes(self) -> list[tuple] | None:
        """The sample shape of each input the model is built on (None before it is built)."""
        return [i.input_shape for i in self._inputs] if self.built else None

    def prepare_inputs(self, x, name: str = "x") -> np.ndarray:
        """x checked and viewed as (samples, features), still in its own dtype (a memmap is not
        read), the model built for its shapes (ensure_built). A model of
        several inputs takes a list of arrays in input order or a dict by input name, and gets
        their features side by side (a copy). Errors name `name`."""
        if len(self._inputs) > 1:
            names = [i.name for i in self._inputs]
            pairs = by_name(x, names, name, "input")
            labels = [f"{name}[{key!r}] (input {n!r})" for (key, _), n in zip(pairs, names)]
            arrays = [_batch(part, label) for (_, part), label in zip(pairs, labels)]
            self.ensure_built([a.shape[1:] for a in arrays], labels)
            parts = [self._checked_input(a, label, source) for a, label, source in zip(arrays, labels, self._inputs)]
            if len({len(p) for p in parts}) > 1:
                raise ValueError(f"the arrays of {name} have {[len(p) for p in parts]} samples; they must match")
            return np.concatenate(parts, axis=1)
        if isinstance(x, (list, tuple)) and len(x) == 1 and not np.isscalar(x[0]):
            x = x[0]  # Keras takes [x] for a model of one input
        elif isinstance(x, dict) and self._inputs and list(x) == [self._inputs[0].name]:
            x = x[self._inputs[0].name]
        x = _batch(x, name)
        self.ensure_built([x.shape[1:]], [name])
        return self._checked_input(x, name, self._inputs[0])

    def _checked_input(self, x: np.ndarray, name: str, source: Input) -> np.ndarray:
        if tuple(x.shape[1:]) != tuple(source.input_shape):
            raise ValueError(f"{name} has shape {x.shape}, but the model's first layer expects samples of "
                             f"shape {tuple(source.input_shape)}")
        for layer in {id(c.layer): c.layer for c in self._calls if any(t is source.output for t in c.inputs)}.values():
            layer.check_input(x, name)  # e.g. Embedding's ids, before any launch
        return x.reshape(len(x), -1)

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
        """Everything needed to resume training, in one HDF5 file (see docs/checkpoint-format.md);
        a path ending in .keras gets Keras 3's archive instead (config, weights and compile
        settings, which Keras loads; clnet.keras_archive)."""
        if str(path).endswith(".keras"):
            from .keras_archive import save
            save(self, path)
            return
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
        takes clnet.onnx.export's `opset`, `batch`, `target` and `float16`."""
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
        graph, position, refs, calls = self._graph_refs()
        return {"class_name": "Model", "name": self.name, "floatx": self.dtype.name, "seed": self.seed,
                "layers": [_layer_config(l) for l in graph["layers"]], "calls": calls,
                "inputs": [position[id(i)] for i in graph["inputs"]], **self._outputs_config(refs, graph["outputs"]),
                # The lengths it was last made on, which its weights (and optimizer) were built for.
                **({"built_on": [list(i.input_shape) for i in self._inputs]} if self._pattern and self.built else {})}

    def _graph_refs(self):
        """The graph as get_config writes it: (graph, layer positions, each tensor's [layer index,
        k(, j)] by id, the calls)."""
        # A model of lengths None is saved as given (its Inputs with None), not as made on data.
        graph = self._pattern or self._graph_as_made()
        position = {id(l): i for i, l in enumerate(graph["layers"])}
        refs = {id(i.output): [position[id(i)], 0] for i in graph["inputs"]}
        made: dict[int, int] = {}
        calls = []
        for call in graph["calls"]:
            k = made.get(id(call.layer), 0)
            made[id(call.layer)] = k + 1
            if call.mask is not None and call.mask is not call.inputs[0]._keras_mask:
                raise ValueError(f"{call.layer.describe()} was given mask= explicitly; clnet cannot write such a "
                                 "graph's config yet (a mask its input carries, from Embedding(mask_zero=True) or "
                                 "Masking, is saved with the layer that makes it)")
            if any(id(t) not in refs for t in call.given_inputs):  # (a mask an Embedding or Masking makes)
                raise ValueError(f"{call.layer.describe()} reads a mask as an input of its own (an attention mask "
                                 "made from padding masks by ops of your own); clnet cannot write such a graph's "
                                 "config yet")
            calls.append({"layer": position[id(call.layer)], "inputs": [refs[id(t)] for t in call.given_inputs]})
            refs.update({id(t): [position[id(call.layer)], k] + ([t.index] if t.index else []) for t in call.outputs})
        return graph, position, refs, calls

    def tensor_shapes(self) -> dict[tuple, tuple]:
        """Each tensor of the graph by get_config's reference, (layer index, k, j) (j = 0 for a
        call's first output), and its sample shape: what a writer of another format (Keras's
        .keras) needs beside get_config."""
        graph, _, refs, _ = self._graph_refs()
        tensors = [i.output for i in graph["inputs"]] + [t for call in graph["calls"] for t in call.outputs]
        return {(*refs[id(t)][:2], refs[id(t)][2] if len(refs[id(t)]) > 2 else 0): tuple(t.sample_shape)
                for t in tensors}

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
            sources[id(call.layer)].extend(t.call.layer.name + (f"[{t.index}]" if t.index else "")
                                           for t in call.given_inputs)
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
        trainable = sum(w.size for layer in self._layers if layer.trainable
                        for p, w in zip(layer.parameters, layer.get_weights()) if p.trainable)
        print(f"Total params: {total:,}", file=file)
        print(f"Trainable params: {trainable:,}", file=file)
        print(f"Non-trainable params: {total - trainable:,}", file=file)


class Sequential(Model):
    """A plain stack of layers, as Keras's `Sequential(layers)`: the graph engine over a chain of
    calls, each layer called on the previous one's output.

    - `layers=None`: a list of layers, which may start with an `Input` (or give the first layer
      `input_shape=`); more can be added with `add(layer)`. A model that knows its input shape is
      built at once, as Keras's; one that does not builds on its first data.
    - `name=None`: the model's name (default `"sequential"`).
    - `floatx=None`, `seed=None`: as Model's: the float type (default `clnet.floatx()`) and the seed
      of its weight initialisation, dropout and shuffling (default `clnet.set_seed`'s, else a fresh
      one).

    Its `layers` leave out the `Input`, as Keras's. A `Lambda` cannot be a layer of a Sequential (it
    runs its function when called): use the functional API."""
    default_name = "sequential"

    def __init__(self, layers=None, name: str | None = None, floatx: str | None = None, seed: int | None = None):
        super().__init__(name=name, floatx=floatx, seed=seed)
        for layer in layers or []:
            self._append(layer)
        if self.input_shape is not None:  # Keras: a model that knows its input is built at once
            self._build_or_keep_pattern()

    def _build_or_keep_pattern(self) -> None:
        """Build on the input shape; one with lengths of None (Input((None, 5))) is kept as the
        graph a functional model of such an Input keeps, made again on each data's lengths."""
        if has_lengths([self.input_shape]):
            self._inputs, self._calls, output = self._chain(self.input_shape)
            self._outputs, self._output_names, self._output_structure = [output], [output.call.layer.name], "single"
            self._pattern = self._graph_as_made()
        else:
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
            self._build_or_keep_pattern()
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

    def build(self, input_shape=None) -> None:
        """Build every layer for samples of `input_shape` (without the batch axis) on the current device."""
        if self._pattern is not None:  # an Input of lengths None: the graph made on `input_shape`
            return super().build(input_shape)
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
            mask = input_mask(layer, [tensor])  # (Keras's masks: see Layer.mask_handling)
            calls.append(masked_call(layer, [tensor], shapes, mask))
            tensor = calls[-1].output
        return [source], calls, tensor

    def get_config(self) -> dict:
        # A stack on an Input of lengths None is saved as given, with the lengths it was last made
        # on (which its weights were built for), as a functional model of such an Input is.
        made_on = list(self._inputs[0].input_shape) if self.built else None
        return {"name": self.name, "floatx": self.dtype.name, "seed": self.seed,
                "input_shape": None if self._pattern else made_on,
                "layers": [_layer_config(l) for l in (self._pattern["layers"] if self._pattern else self._layers)],
                **({"built_on": made_on} if self._pattern and self.built else {})}

    @classmethod
    def from_config(cls, config: dict, floatx: str | None = None, custom_objects: dict | None = None) -> "Sequential":
        register_custom_objects(custom_objects)
        layers = [_layer_from_config(entry) for entry in config["layers"]]
        model = cls(layers, name=config["name"], floatx=floatx or config["floatx"], seed=config["seed"])
        shape = config.get("built_on") or config.get("input_shape")
        if shape is not None and not model.built:
            model.build(tuple(shape))
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
    """A Sequential or functional model from its `get_config()` (a dict with `"class_name"`
    `"Model"` for a functional one, else a Sequential), as `keras.models.model_from_config`;
    `floatx` as Model's, by default `clnet.floatx()`. Its layers are found by class name among the
    registered layers (clnet's and your own classes' that are imported)."""
    return (Model if config.get("class_name") == "Model" else Sequential).from_config(config, floatx)


# What an instantiation of a model of lengths None holds: its graph made on the data's lengths,
# built (its layers' copies and their buffers), and its step's plan and buffers. ensure_built keeps
# one per lengths (at most KEPT_INSTANTIATIONS), so that batches of other lengths switch between
# them rather than build again.
INSTANTIATION = ("_inputs", "_outputs", "_calls", "_layers", "_mask_calls", "runs", "batch_transposed", "_own_store",
                 "_whole_store", "_parameters", "_ranges", "output_shape", "_residuals", "_folded", "_heads",
                 "_loss_masks", "_output_masks", "_fan_out", "_input_widths", "capacity", "_grad_plans", "_grad_sums",
                 "_input_batches", "_logit_outputs", "_sixteen_bit_pairs")
KEPT_INSTANTIATIONS = 8


def _layer_config(layer: Layer) -> dict:
    config = layer.get_config()
    if not layer.trainable and "frozen" not in config:  # (Keras writes it always; clnet where it is not the default)
        config = {**config, "trainable": False}
    if not layer.is_input and (layer.dtype_given or layer.dtype_policy.compute_dtype in dtype_policies.SIXTEEN_BITS):
        config = {**config, "dtype": layer.dtype_policy.name}
    return {"class_name": type(layer).__name__, "config": config}


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

    def __init__(self, store: ParameterStore, owned: list, layer: Layer, shape, replaces: bool = False):
        super().__init__(store)
        self._owned, self._layer, self._shape, self._replaces = iter(owned), layer, shape, replaces

    def add(self, initial, *args, **kwargs):
        owner = next(self._owned, None)
        if owner is None or owner.shape != np.shape(initial):
            layer = self._layer
            raise ValueError(f"{layer.describe()} was built for inputs of shape {layer.built_input_shape} and cannot "
                             f"be called on inputs of shape {self._shape}: its weights have other shapes (a layer "
                             "keeps the weights it was built with)")
        return self.store.share(owner, self._replaces)



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
        result = call.layer([made[id(t)] for t in call.given_inputs])
        made.update(zip(map(id, call.outputs), result if isinstance(result, list) else [result]))
    return [made[id(o)] for o in graph["outputs"]]



def _output_name(tensor: KerasTensor, taken: set) -> str:
    """An output's name, as Keras's: its layer's, made unique (a recurrent layer's states follow
    its output: lstm, lstm_1, lstm_2)."""
    base = tensor.call.layer.name
    name = base if base not in taken else next(f"{base}_{i}" for i in range(1, len(taken) + 2)
                                               if f"{base}_{i}" not in taken)
    taken.add(name)
    return name









