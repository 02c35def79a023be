"""The layer lifecycle: __init__ validates and stores config, build() declares parameters,
allocate() makes the per-batch device buffers, forward()/backward() launch kernels."""
from __future__ import annotations

import copy
import functools
import inspect
import re
import warnings
from contextlib import contextmanager

import numpy as np

from ..cl.parameters import ParameterStore
from ..cl.runtime import floatx
from ..dtype_policies import DTypePolicy, policy_of
from ..stacklevel import outside_clnet
from ..cl.tensor import Tensor


class KerasTensor:
    """A symbolic batch of samples: the output of a layer call, what `Model(inputs, outputs)` is
    made of. `shape` has the batch axis (None) first, as in Keras.

    A tensor that is not `batched` has no batch axis: a weight of a subclassed layer
    (add_weight), a constant a traced call() gave a layer, or what layers made of those alone.
    It is the same for every sample, computed once per step as one row (`sample_shape` is then
    its whole shape); an op that mixes it with a batch broadcasts it over the rows and sums its
    gradient over them."""

    def __init__(self, sample_shape: tuple, call: "Call", index: int = 0, batched: bool = True):
        self.sample_shape = tuple(sample_shape)
        self.call = call
        self.index = index  # which of the call's outputs (a recurrent layer's states follow its output)
        self.batched = batched

    # Keras's mask of a sequence (Embedding(mask_zero=True), Masking): a tensor of the sample's
    # leading axes, (batch, time), 1 where a step holds data and 0 where it is padding, which
    # travels with the tensor through the layers that support masking (see Layer.mask_handling).
    _keras_mask: "KerasTensor | None" = None

    @property
    def shape(self) -> tuple:
        return (None, *self.sample_shape) if self.batched else self.sample_shape

    @property
    def dtype(self) -> str:
        """Keras's tensor dtype: an Input's declared one, else the float type of its layer (or the
        default, clnet.floatx(), before a model builds it)."""
        layer = self.call.layer
        if getattr(layer, "is_input", False) and layer.input_dtype:
            return layer.input_dtype
        return np.dtype(getattr(layer, "dtype", None) or floatx()).name

    def describe(self) -> str:
        return f"{self.shape} from {self._producer()}"

    def _producer(self) -> str:
        return self.call.layer.describe() + (f" (output {self.index})" if self.index else "")

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape}, produced by {self._producer()}>"

    # Python's operators, as Keras's KerasTensor has them: each a clnet.ops call of the graph.
    # clnet.ops is imported inside each, not above: it imports the layers, and this file is the
    # bottom of that ladder. == and != are not ops (as in Keras): tensors stay dict keys and set
    # members compared by identity. numpy defers to these (`array * x` calls x.__rmul__) rather
    # than making an object array of one op per element.
    __array_ufunc__ = None

    def __add__(self, other):
        from .. import ops
        return ops.add(self, other)

    def __radd__(self, other):
        from .. import ops
        return ops.add(other, self)

    def __sub__(self, other):
        from .. import ops
        return ops.subtract(self, other)

    def __rsub__(self, other):
        from .. import ops
        return ops.subtract(other, self)

    def __mul__(self, other):
        from .. import ops
        return ops.multiply(self, other)

    def __rmul__(self, other):
        from .. import ops
        return ops.multiply(other, self)

    def __truediv__(self, other):
        from .. import ops
        return ops.divide(self, other)

    def __rtruediv__(self, other):
        from .. import ops
        return ops.divide(other, self)

    def __pow__(self, other):
        from .. import ops
        return ops.power(self, other)

    def __rpow__(self, other):
        from .. import ops
        return ops.power(other, self)

    def __matmul__(self, other):
        from .. import ops
        return ops.matmul(self, other)

    def __rmatmul__(self, other):
        from .. import ops
        return ops.matmul(other, self)

    def __neg__(self):
        from .. import ops
        return ops.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        from .. import ops
        return ops.abs(self)

    def __gt__(self, other):
        from .. import ops
        return ops.greater(self, other)

    def __ge__(self, other):
        from .. import ops
        return ops.greater_equal(self, other)

    def __lt__(self, other):
        from .. import ops
        return ops.less(self, other)

    def __le__(self, other):
        from .. import ops
        return ops.less_equal(self, other)

    def __getitem__(self, key):
        """Basic slicing of the sample axes: x[:, 1:], x[:, :, 0], x[..., :3] (see ops.slice_key)."""
        from .. import ops
        return ops.getitem(self, key)

    # __getitem__ would otherwise make Python iterate a tensor by indexing 0, 1, ... forever.
    __iter__ = None

    def __bool__(self):
        raise TypeError(f"a symbolic tensor {self.shape} from {self._producer()} has no truth value: Python's `if`, "
                        "`while`, `and`, `or` on a tensor cannot be traced; use clnet.ops (ops.where, ops.maximum)")


class Call:
    """One application of a layer to symbolic inputs. Calls are numbered as they are made, and a
    call's inputs always exist before it, so that numbering is a topological order of any graph.
    A call has an output per shape in `output_shapes`: most layers one, `output`; a recurrent
    layer with return_state also its final states. Its outputs have a batch axis if an input
    has (an Input's always), none if no input has (see KerasTensor)."""
    made = 0

    def __init__(self, layer: "Layer", inputs: list[KerasTensor], output_shapes: list[tuple],
                 batched: bool | None = None, mask: KerasTensor | None = None):
        self.layer, self.inputs = layer, list(inputs)
        Call.made += 1
        self.number = Call.made
        self.batched = any(t.batched for t in self.inputs) if batched is None else batched
        self.outputs = [KerasTensor(shape, self, k, self.batched) for k, shape in enumerate(output_shapes)]
        self.output = self.outputs[0]
        self.mask = mask
        layer.__dict__.setdefault("inbound_calls", []).append(self)

    # The mask its layer's forward reads (mask_handling "consume"), and the one its forward makes
    # beside its output (Embedding(mask_zero=True), Masking): neither is among the call's inputs
    # or outputs, so configs, summaries and exports see the graph as Keras's.
    mask: KerasTensor | None = None
    made_mask: KerasTensor | None = None
    # Inputs its layer makes again from its other inputs' masks when the call is made again
    # (MultiHeadAttention's padding attention mask): the graph as given (config, summary) leaves
    # them and the ops that made them out, as it leaves out masks.
    derived_inputs: frozenset = frozenset()

    @property
    def given_inputs(self) -> list[KerasTensor]:
        """The inputs a config records: all but the derived ones."""
        return [t for i, t in enumerate(self.inputs) if i not in self.derived_inputs]


# Python's operators of a tensor (KerasTensor's, forwarded by Input and Variable).
TENSOR_OPERATORS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
                    "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__pos__", "__abs__", "__gt__",
                    "__ge__", "__lt__", "__le__", "__getitem__")


class HasWeights:
    """Keras's lists of a layer's or a model's `weights` (Variables) by trainability."""

    @property
    def trainable_weights(self) -> list:
        return [w for w in self.weights if w.trainable]

    @property
    def non_trainable_weights(self) -> list:
        return [w for w in self.weights if not w.trainable]

    @property
    def trainable(self) -> bool:
        """Whether fit trains this layer's (or model's) weights, as Keras's: False freezes them (the
        optimizer leaves them and keeps no moments for them; a BatchNormalization then normalises
        with its moving statistics, as Keras 3's). Set, it sets the layers it holds too."""
        return self.__dict__.get("_trainable", True)

    @trainable.setter
    def trainable(self, value) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{self.describe()}: trainable must be True or False, got {value!r}")
        reached, pending, users = {}, [self], {}
        while pending:  # this one and every layer it holds, each once
            item = pending.pop()
            if id(item) not in reached:
                reached[id(item)] = item
                item._trainable = bool(value)
                pending += item.held_layers()
        for item in reached.values():
            if hasattr(item, "trainability_changed"):  # (a model)
                users[id(item)] = item
            elif item.built:  # the models that read its weights
                users.update((id(m), m) for p in item.parameters if p.store is not None for m in p.store.users)
        for model in users.values():  # (they train what is trainable from their next step on)
            model.trainability_changed()

    def follow_trainability(self, layer: "HasWeights") -> None:
        """Take `layer`'s trainable flag as it is, alone: a copy a model runs for a layer follows it
        (the layer's setter has told the models already)."""
        self._trainable = layer.trainable

    def held_layers(self) -> list:
        """The layers this one holds (a wrapper's, a subclass's, a model's): what `trainable` sets."""
        held = [v.layer for v in self.__dict__.get("_variables", ())]  # (add_weight's Weight layers)
        held += [h for h in leaves_of([v for k, v in self.__dict__.items() if k != "inbound_calls"])
                 if h is not self and isinstance(h, HasWeights)]
        return list({id(h): h for h in held}.values())


class Layer(HasWeights):
    """The base of every layer, and Keras's `Layer` to subclass. Every layer takes `name=None` (a
    string; by default Keras's automatic names, `dense`, `dense_1`, ..., which
    `clnet.utils.clear_session()` starts again), `input_shape=None` (the sample's shape without the
    batch axis, Keras's way of starting a `Sequential` without an `Input`), `trainable=True`
    (False freezes its weights: the optimizer leaves them) and `dtype=None` (Keras's dtype policy:
    a name such as `"mixed_bfloat16"` or a `clnet.mixed_precision.DTypePolicy`; None is the global
    policy; `dtype_policy`, `compute_dtype` and `variable_dtype` give it back, see
    clnet/dtype_policies.py for what clnet computes in).

    Called on symbolic tensors (an `Input`, another call's output) a layer adds a call to the graph
    and returns its output (a list for a layer of several, `y, h, c = LSTM(8,
    return_state=True)(x)`); calling it again shares its weights. Called on numpy arrays outside a
    trace it computes at once and returns numpy arrays, as Keras's eager call. `weights`,
    `trainable_weights`, `non_trainable_weights` list its weights as Variables;
    `get_weights()`/`set_weights()` take Keras's layouts; `get_config()`/`from_config()` round-trip
    its arguments.

    Two ways to write a layer of your own:

    - As Keras's guides do: a subclass that defines `call(inputs)` with clnet layers (made in
      `__init__` or `build`) and `clnet.ops`, and its own weights from `add_weight(shape,
      initializer, trainable, name)`. It is traced when called: what `call()` applies becomes calls
      of the graph, so a model lists, saves and exports the layers it is made of and needs no custom
      object to load. `build(input_shape)` runs first, the shape with the batch axis (None) first;
      `call(self, inputs, mask=None)` gets the first input's mask and `compute_mask(inputs, mask)`
      gives the outputs theirs. `training=True`/`False` passed to a layer is refused: the model's
      mode decides (`fit` trains, `evaluate` and `predict` infer).
    - With OpenCL kernels of your own: a subclass without `call()` that implements
      `build(input_shape, store, rng)`, `allocate`, `forward` and `backward` (see the guide "Writing
      a layer with its own kernels"). It registers itself by its class name, which is how
      `from_config` and `load_model` find it."""
    registry: dict[str, type["Layer"]] = {}
    # Merge layers take a list of inputs: forward(xs, rows), backward(grad, rows, input_grads) -> list.
    multi_input = False

    def __init_subclass__(cls, registered=True, **kwargs):
        super().__init_subclass__(**kwargs)
        # A shared base (BaseConv, Recurrent, registered=False; or a private _Merge), or a part
        # another layer builds for itself (JoinedDense, registered=False), is no layer of a config
        # of its own; nor is a subclass with call(), which is traced into the layers it calls.
        if registered and not cls.__name__.startswith("_") and cls.call is Layer.call:
            Layer.registry[cls.__name__] = cls
        init = cls.__dict__.get("__init__")
        if init is not None and "trainable" not in inspect.signature(init).parameters:
            cls.__init__ = _taking_trainable(init)

    def __init__(self, name: str | None = None, input_shape=None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        # Keras's automatic names, given at construction: dense, dense_1, ... (clear_session()
        # starts them again).
        self.name = unique_name(self.name_prefix or snake_case(type(self).__name__)) if name is None else name
        self.inbound_calls: list[Call] = []  # its calls, in the order made
        self.input_shape = None if input_shape is None else checked_shape("input_shape", input_shape)
        self.output_shape = None
        self.built = False
        self.capacity = 0  # rows the per-batch buffers hold

    name_prefix: str | None = None  # the automatic names' stem, if not the class's name in snake case

    @property
    def dtype_policy(self) -> DTypePolicy:
        """Keras's: the layer's policy, its `dtype=` argument or the global policy when it was made."""
        return self.__dict__.get("_dtype_policy") or policy_of(None)

    @dtype_policy.setter
    def dtype_policy(self, value) -> None:
        self._dtype_policy = policy_of(value, "dtype_policy")
        self.dtype_given = True

    @property
    def compute_dtype(self) -> str:
        """The policy's compute dtype, as Keras gives it (what clnet computes in is the model's
        float type: see clnet/dtype_policies.py)."""
        return self.dtype_policy.compute_dtype

    @property
    def variable_dtype(self) -> str:
        return self.dtype_policy.variable_dtype

    dtype_given = False  # a dtype= (or dtype_policy) was given, which the model's float type must agree with
    is_input = False  # an Input, which stands for its output tensor wherever a tensor is taken

    def describe(self) -> str:
        return f"{type(self).__name__} {self.name!r}" if self.name else type(self).__name__

    @property
    def output(self):
        """The output of the layer's first call (a list for a layer of several), as Keras's."""
        return self._first_call("output", lambda call: call.output if len(call.outputs) == 1 else list(call.outputs))

    @property
    def input(self):
        """The input of the layer's first call (a list for a layer of several), as Keras's."""
        return self._first_call("input", lambda call: call.inputs[0] if len(call.inputs) == 1 else list(call.inputs))

    def _first_call(self, what: str, pick):
        calls = self.__dict__.get("inbound_calls")
        if not calls:
            raise AttributeError(f"{self.describe()} has never been called and thus has no defined {what}")
        return pick(calls[0])

    # -- the functional API -------------------------------------------------------------------
    def __call__(self, inputs, *args, **kwargs) -> KerasTensor | list[KerasTensor]:
        """Apply the layer to symbolic tensors (Input layers or other calls' outputs). Calling one
        layer twice shares its weights; shapes are checked here, when the graph is made. A layer
        of several outputs returns their list, as Keras (`y, h, c = LSTM(8, return_state=True)(x)`).
        A subclass that defines call(), as Keras's, is traced instead (see call). On arrays, out
        of a trace, the layer computes now, as Keras's eager call (see clnet.model.call_eagerly);
        inside a traced call() an array is a constant of the graph."""
        if not tracing() and is_concrete(inputs):
            from ..model import call_eagerly  # (the model runs it: above this file on the ladder)
            return call_eagerly(self, inputs, args, kwargs)
        if type(self).call is not Layer.call:
            return self._traced(inputs, args, kwargs)
        check_call_arguments(self, args, **kwargs)
        tensors = self._symbolic(inputs)
        mask = input_mask(self, tensors, kwargs.get("mask"))
        if self.built:
            shapes = [t.sample_shape for t in tensors]
            self.check_weights_fit(shapes if self.multi_input else shapes[0])
        if self.multi_input:
            shapes = output_shapes(lambda s: [self.compute_output_shape(s, tensors)], [t.sample_shape for t in tensors])
        elif len(tensors) != 1:
            raise ValueError(f"{self.describe()} takes one input, got {len(tensors)}")
        else:
            shapes = output_shapes(self.compute_output_shapes, tensors[0].sample_shape)
        call = masked_call(self, tensors, shapes, mask)
        return call.output if len(call.outputs) == 1 else list(call.outputs)

    # -- subclasses written as Keras's ----------------------------------------------------------
    def call(self, inputs, *args, **kwargs):
        """A subclass's computation, as Keras's Layer.call: clnet layers (made in `__init__` or
        build) and clnet.ops applied to `inputs`, symbolic tensors. It is traced when the layer
        is called: what it calls becomes calls of the graph (the layer itself adds none, so a
        model lists and saves the layers it is made of), and calling it again shares their
        weights. The first call first runs build(input_shape), the shape with the batch axis
        (None) first, as Keras's. What call() does to tensors must be layers and ops: Python
        control flow on a tensor, or numpy on one, raises while tracing."""
        raise NotImplementedError(f"{self.describe()} defines no call()")

    def add_weight(self, shape=None, initializer=None, dtype=None, trainable=True, autocast=True, regularizer=None,
                   constraint=None, aggregation="none", overwrite_with_gradient=False, name=None):
        """A weight of this layer, as Keras's add_weight (in `__init__` or build): a Variable that
        call() uses as an operand of ops (`ops.matmul(inputs, self.w) + self.b`), trained with
        the layer's other weights. Its value is drawn by `initializer` (default glorot_uniform)
        when a model first builds it, and is kept in the model's float type."""
        for argument, value in (("regularizer", regularizer), ("constraint", constraint)):
            if value is not None:
                raise ValueError(f"{self.describe()}: add_weight({argument}=...) is not supported; clnet weights "
                                 f"have no {argument}s")
        if aggregation not in ("none", "mean", "sum", "only_first_replica") or overwrite_with_gradient:
            raise ValueError(f"{self.describe()}: add_weight takes aggregation='none' and overwrite_with_gradient="
                             f"False only, got {aggregation!r} and {overwrite_with_gradient!r}")
        if dtype is not None and np.dtype(dtype).name not in ("float32", "float64"):
            raise TypeError(f"{self.describe()}: add_weight dtype must be a float type (a weight is kept in the "
                            f"model's float type), got {dtype!r}")
        from .weight import Variable, Weight  # (which subclass this file's Layer)
        variables = self.__dict__.setdefault("_variables", [])
        if name is None:  # Keras's: variable, variable_1, ...
            name = f"variable_{len(variables)}" if variables else "variable"
        if any(v.name == name for v in variables):
            raise ValueError(f"{self.describe()} has a weight named {name!r} already")
        weight = Weight(shape, "glorot_uniform" if initializer is None else initializer, trainable,
                        name=unique_name(f"{self.name}_{name}"))
        variable = Variable(weight, 0, name, self)
        variables.append(variable)
        return variable

    @property
    def weights(self) -> list:
        """The layer's weights as Variables, as Keras's: a subclass's own (add_weight) then those of
        the layers it holds, each once; a built-in layer's in get_weights() order (none until built)."""
        if type(self).call is Layer.call:
            if not self.built or not self.parameters:
                return []
            from .weight import Variable
            views = self.__dict__.get("_weight_views")
            if views is None or len(views) != len(self.parameters):
                views = self._weight_views = [Variable(self, i, f"weight_{i}", self) for i in range(len(self.parameters))]
            return list(views)
        found = {id(v): v for v in self.__dict__.get("_variables", [])}
        for held in leaves_of(list(self.__dict__.values())):  # its layers, and lists or dicts of them
            if held is not self and (isinstance(held, Layer) or _is_model(held)):
                found.update((id(v), v) for v in held.weights)
        return list(found.values())

    def _traced(self, inputs, args, kwargs):
        inputs = tensors_of(inputs)
        leaves = leaves_of(inputs)
        if not leaves or not all(isinstance(t, KerasTensor) for t in leaves):
            raise TypeError(f"{self.describe()} was called on {inputs!r}; expected the output of Input(shape) or of "
                            "another layer call (or a list or dict of them)")
        if not self.built:
            shapes = _structure_like(inputs, [t.shape for t in leaves])
            self.build(shapes)
            self.built = True
        check_call_arguments(self, (), training=kwargs.get("training"))  # (True or False cannot be followed)
        parameters = inspect.signature(self.call).parameters
        if kwargs.get("training") is None and "training" in parameters:
            kwargs = {**kwargs, "training": ModelMode()}
        # Keras's masks: the first input's (or the call's mask argument) for a call() that takes
        # one; what the traced layers' outputs carry stays on them, and a layer that defines
        # compute_mask (or propagates) gives those that carry none its own.
        given = None if kwargs.get("mask") is None else checked_mask(self, leaves[0], kwargs["mask"])
        mask = given if given is not None else leaves[0]._keras_mask
        defines_mask = type(self).compute_mask is not Layer.compute_mask or self.mask_handling == "propagate"
        if "mask" in parameters:
            kwargs = {**kwargs, "mask": mask}
        else:
            kwargs.pop("mask", None)
            if mask is not None and not defines_mask:
                drop_mask_warning(self)
        try:
            with trace_scope():
                result = self.call(inputs, *args, **kwargs)
        except Exception as error:
            error.add_note(f"(raised while tracing {self.describe()}.call() on symbolic tensors)")
            raise
        result = tensors_of(result)
        outputs = leaves_of(result)
        if not outputs or not all(isinstance(t, KerasTensor) for t in outputs):
            raise TypeError(f"{self.describe()}.call() returned {result!r}; a traced call() must return the symbolic "
                            "tensors that clnet layers and ops gave it (one, a list or a dict of them)")
        if defines_mask and (mask is not None or any(t._keras_mask is not None for t in leaves)):
            mark_outputs(outputs, self.compute_mask(inputs, mask))
        return result

    def check_weights_fit(self, input_shape) -> None:
        """A built layer called on inputs of another shape than it was built for runs with the
        weights it has (a recurrent layer over fewer steps): a trial build for that shape, on a
        store never allocated, must declare weights of the same shapes, or the call raises here."""
        built = self.built_input_shape
        if input_shape == built or has_lengths(input_shape):  # (a length of None: checked when data gives it)
            return
        trial = copy.copy(self)
        trial.allocated_rows = 0
        scratch = ParameterStore(self.rt, self.dtype)
        trial.build(input_shape, scratch, np.random.default_rng(0))
        if sorted(p.shape for p in scratch.parameters) != sorted(p.shape for p in self.parameters):
            raise ValueError(f"{self.describe()} was built for inputs of shape {built} and cannot be called on "
                             f"inputs of shape {input_shape}: its weights have other shapes (a layer keeps the "
                             "weights it was built with)")

    @property
    def built_input_shape(self):
        """The sample shape the layer was built for (a multi-input layer's: the list of them)."""
        return self.input_shapes if self.multi_input else self.input_shape

    def _symbolic(self, inputs) -> list[KerasTensor]:
        """The tensors a call reads: `inputs` (one or a list), an Input standing for its output,
        an array (while tracing) a Constant's. A tensor without a batch axis goes only with others
        of none, except into the ops that broadcast it over a batch (`takes_unbatched`)."""
        tensors = tensors_of(list(inputs) if isinstance(inputs, (list, tuple)) else [inputs])
        for k, t in enumerate(tensors):
            if not isinstance(t, KerasTensor) and tracing() and is_concrete(t):
                from .weight import Constant
                array = np.asarray(t)
                self.check_input(array[None], f"the array {self.describe()} was called on")
                tensors[k] = Constant(array, name=unique_name("constant"))([])
            elif not isinstance(t, KerasTensor):
                raise TypeError(f"{self.describe()} was called on {type(t).__name__}; expected the output of "
                                "Input(shape) or of another layer call")
        unbatched = ", ".join(str(t.shape) for t in tensors if not t.batched)
        if unbatched and not self.takes_unbatched and (self.counts_batch_axis or len({t.batched for t in tensors}) > 1):
            raise ValueError(f"{self.describe()} was called on a tensor without a batch axis (a weight or a constant: "
                             f"{unbatched}); it takes " + ("tensors with one (its axes count it)" if
                                                           self.counts_batch_axis else "one or the other, not both") +
                             ". Ops that broadcast a weight over the batch: elementwise ops, ops.matmul")
        return tensors

    # An op that broadcasts a tensor without a batch axis over the rows of one with (its gradient
    # summed over them): Elementwise, MatMul. An op whose axis arguments count the batch axis
    # (reductions, shapes, indexing) takes only tensors that have it; other layers take tensors
    # without one alone (an Embedding of positions), computed as one sample.
    takes_unbatched = False
    counts_batch_axis = False

    # -- lifecycle -------------------------------------------------------------------------
    def build(self, input_shape: tuple, store: ParameterStore | None = None, rng: np.random.Generator | None = None):
        """Check the input shape (without the batch axis), declare parameters, return the output
        shape. A subclass with call() is built as Keras's: build(input_shape), which marks it built."""
        if store is None:
            self.built = True
            return None
        self.input_shape = tuple(input_shape)
        self.rt, self.dtype = store.rt, store.dtype
        self.output_shape = self.compute_output_shape(self.input_shape)
        self.built = True
        return self.output_shape

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape

    def compute_output_shapes(self, input_shape: tuple) -> list[tuple]:
        """Every output's shape. A layer of several outputs returns them all from forward, as a
        list in this order, and takes their gradients in backward: the first as `grad`, the
        others as `state_grads` (None where nothing reads one)."""
        return [self.compute_output_shape(input_shape)]

    # Why a layer that refuses a mask does (mask_handling "refuse"), for its error.
    mask_refusal = ""

    # How the layer treats a mask on its input (Keras's supports_masking and compute_mask):
    # "propagate": its outputs carry the input's mask (a layer that works step by step: Dense,
    #   Dropout, the activations, LayerNormalization);
    # "consume": its forward reads it (forward(..., mask=), a (rows, *mask shape) tensor of 1 and
    #   0), and compute_mask says what its outputs carry (a recurrent layer, GlobalAveragePooling1D);
    # "drop": as a Keras layer that does not support masking (Conv1D, Flatten), it warns and its
    #   outputs carry none;
    # "refuse": Keras's layer would read the mask and this one cannot yet: an error saying so;
    # "ignore": as "drop" without the warning (clnet.ops, whose Keras counterparts keep no masks).
    mask_handling = "drop"

    def compute_mask(self, inputs, mask):
        """Keras's: the mask of the layer's output given its input's (`inputs`, the call's input
        tensors; None where there is none), or a list of one per output; None for none. The
        input's own where the layer propagates it. A subclass with call() may define its own, as
        in Keras."""
        return mask if self.mask_handling == "propagate" else None

    def makes_mask(self) -> bool:
        """Whether the layer's forward makes a mask beside its output (Embedding(mask_zero=True),
        Masking): a (rows, *output shape[:-1]) tensor of 1 and 0, `output_mask` after forward."""
        return False

    def check_input(self, x: np.ndarray, argument: str) -> None:
        """Check the values of `x`, a model input this layer reads directly, before anything is
        launched for it (Embedding: ids in range); raise a ValueError naming `argument`. Most
        layers take any finite number, which the model has checked already."""

    def allocate(self, capacity: int) -> None:
        """Make the device buffers for batches of up to `capacity` rows."""
        self.capacity = capacity

    # The batch rows allocate() was last given by a model: a layer that several models read holds
    # the most any of them asked for, never fewer (see ensure_rows).
    allocated_rows = 0

    def ensure_rows(self, rows: int) -> None:
        """Buffers for batches of at least `rows` rows: allocate(rows) unless they are there."""
        if rows > self.allocated_rows:
            self.allocate(rows)
            self.allocated_rows = rows

    def forward(self, x: Tensor, rows: int) -> Tensor:
        raise NotImplementedError

    def backward(self, grad: Tensor, rows: int, input_grad: bool) -> Tensor | None:
        """Given dL/d(output), compute parameter gradients and, if asked, return dL/d(input)."""
        raise NotImplementedError

    # -- weights and config ----------------------------------------------------------------
    @property
    def parameters(self) -> list:
        return []

    def require_built(self, what: str) -> None:
        """A clear error where a layer's weights are asked for before a model (or a call on arrays)
        has built it."""
        if not self.built:
            raise ValueError(f"{self.describe()} is not built yet, so it has no weights for {what}(): a layer's "
                             "weights are made when a model builds it (a model of Inputs with lengths of None "
                             "builds on its first data, or on build(shapes)), or when it is called on arrays")

    def get_weights(self) -> list[np.ndarray]:
        if type(self).call is not Layer.call:  # a traced subclass: its weights, as Keras lists them
            return [w.numpy() for w in self.weights]
        return [p.to_keras(p.value.numpy()) for p in self.parameters]

    def gradients(self) -> list[np.ndarray]:
        """The last backward pass's parameter gradients, in get_weights() layout (zeros for a
        non-trainable weight, which the loss does not depend on in training)."""
        return [p.to_keras(p.grad.numpy()) if p.trainable and self.trainable else np.zeros(p.keras_index.shape, self.dtype)
                for p in self.parameters]

    def set_weights(self, weights) -> None:
        weights = list(weights)
        if weights:  # (a layer of no weights, or one a fused chain stands for, takes none unbuilt)
            self.require_built("set_weights")
        if type(self).call is not Layer.call:  # a traced subclass: its weights, as Keras lists them
            variables = self.weights
            for variable, array in zip(variables, check_weights(self, weights, [v.shape for v in variables])):
                variable.assign(array)
            return
        if not self.parameters and weights:
            raise ValueError(f"layer {self.name!r} has no weights, got {len(weights)} arrays")
        for p, array in zip(self.parameters, check_weights(self, weights, [p.keras_index.shape for p in self.parameters])):
            device = np.zeros(p.size, self.dtype)  # padding stays 0
            p.from_keras(array, device)
            p.value.write(device.reshape(p.shape))

    def count_params(self) -> int:
        return sum(w.size for w in self.get_weights()) if self.built else 0

    def get_config(self) -> dict:
        config = {"name": self.name}
        if self.input_shape is not None and not self.built:
            config["input_shape"] = list(self.input_shape)
        return config

    @classmethod
    def from_config(cls, config: dict) -> "Layer":
        return cls(**config)

    def to_onnx(self, graph, inputs: list[str]) -> list[str]:
        """Add this layer's ONNX nodes to `graph` (a clnet.onnx.GraphBuilder), reading the tensors
        named `inputs`; return the names of the tensors it writes. Every layer class defines it:
        how is in clnet/onnx/builder.py."""
        raise NotImplementedError(f"layer class {type(self).__name__} has no ONNX export: give it a to_onnx "
                                  "method (see clnet/onnx/builder.py)")

    # The activation whose derivative a loss may fold into its own gradient (softmax + cross-entropy).
    # A layer ending in softmax may also define forward_logits(x, rows): its forward pass without
    # the softmax, returning the softmax's input, which a cross-entropy loss then takes itself.
    output_activation = None
    # y^T (features, rows), Tensor.transposed: a layer whose weight gradient reads its input along
    # rows says so (`reads_transposed`: Dense), and the model's build tells the layer below to
    # write it in its forward pass (`writes_transposed`: Dense, pooling), so that no layer writes a
    # y^T nobody reads and every step launches the same kernels.
    reads_transposed = False
    writes_transposed = False
    # A tensor read by several layers gets the sum of their gradients. A single-input layer that
    # `adds_to_input_grad` takes backward(..., add_to=t), the gradient the later readers gave, and
    # returns dL/dx + t from the same launch: no separate sum (LayerNormalization, whose input in
    # a transformer is the residual stream, read by the norm and by the residual Add).
    adds_to_input_grad = False
    # The forward counterpart: a layer that `adds_to_output` takes forward(..., add=t) and returns
    # y + t from the same launch (a linear Dense, MultiHeadAttention through its output Dense). Where
    # a layer that `sums_inputs` (Add) of two tensors is the only reader of one of them, made by
    # such a layer, and the other is ready before that layer runs, the model has the layer add it
    # and the Add launches nothing: a transformer's residual connections.
    adds_to_output = False
    sums_inputs = False

    # Products on operands stored in 16 bits (a 16-bit policy's Dense on Hopper) round their input
    # to 16 bits before the product, unless the layer below wrote it so: where one layer alone
    # reads another's output, the model calls reader.take_sixteen_bit_inputs(writer) whenever their
    # buffers are made, and the writer's forward, asked by writes_sixteen_bits(target, half), may
    # then write its output in `half` into the reader's 16-bit copy too, in the same launch (Dense,
    # LayerNormalization). It returns what writes it, whose `outputs` is the float output and
    # `outputs16` the 16-bit copy it writes now (another reader may take it later), or None.
    def take_sixteen_bit_inputs(self, writer: "Layer") -> None:
        pass

    def writes_sixteen_bits(self, target: Tensor, half: str):
        return None

    # Set by the model before each forward pass: training (fit) or inference (evaluate, predict),
    # and the optimizer's step count, which seeds per-step randomness (Dropout).
    training = False
    step = 0

    # A distribution that copies gradients off the device while the backward pass goes on
    # (clnet/distribute/base.py, PieceReads) asks a layer whose gradients are large for them in
    # parts: gradient_parts(parts) gives the flat ranges [start, end) of the store's gradients that
    # the layer's backward pass completes one after another (none: all at its end, the default),
    # and hand_over_gradients(parts, done) has the backward pass call done(start, end, event) as
    # each is enqueued, `event` the launch that writes it (parts 1, done None: as without).
    def gradient_parts(self, parts: int) -> list[tuple[int, int]]:
        return []

    def hand_over_gradients(self, parts: int, done) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class BufferedLayer(Layer, registered=False):
    """A layer that writes its outputs, and its input's gradient, into buffers of its own of its
    output's and its input's shapes (a subclass's allocate adds any others it holds)."""

    def allocate(self, capacity):
        super().allocate(capacity)
        self.outputs = Tensor((capacity, *self.output_shape), self.dtype, self.rt)
        self.input_grad = Tensor((capacity, *self.input_shape), self.dtype, self.rt)


def check_call_arguments(layer: "Layer", args: tuple, training=None, mask=None, **kwargs) -> None:
    """A layer call's arguments beyond its inputs, as Keras code passes them: `training` may be
    given as None (a traced call() passes its own along), as the model's mode decides it; `mask`,
    a symbolic tensor, stands for the input's own (see input_mask)."""
    if args or kwargs:
        raise TypeError(f"{layer.describe()} was called with unexpected arguments "
                        f"{[*map(repr, args), *kwargs]}; it takes its inputs (and training=None, mask=None)")
    if training is not None and not isinstance(training, ModelMode):
        raise ValueError(f"{layer.describe()} was called with training={training!r}: clnet runs each layer in the "
                         "model's mode (fit trains, evaluate and predict infer); leave training=None")


def input_mask(layer: "Layer", tensors: list[KerasTensor], given=None) -> KerasTensor | None:
    """The mask a call of `layer` on `tensors` goes on with, by Keras's rules: `given` (the call's
    mask argument) or the inputs' own; None where the layer drops it (with Keras's warning) or
    there is none. A layer that would read a mask and cannot raises, as does a layer given
    inputs of different masks, or a mask whose shape is not the input's leading axes."""
    masks = [checked_mask(layer, tensors[0], given)] if given is not None else [t._keras_mask for t in tensors]
    if layer.mask_handling == "consume":
        masks = masks[:1]  # (a recurrent layer's initial states carry none that it reads, as Keras)
    distinct = list({id(m): m for m in masks if m is not None}.values())
    if not distinct:
        return None
    if layer.mask_handling == "refuse":
        raise ValueError(f"{layer.describe()} was given an input with a mask (from Embedding(mask_zero=True) or "
                         f"Masking), which Keras's {type(layer).__name__} reads and clnet's cannot yet: "
                         f"{layer.mask_refusal}")
    if layer.mask_handling == "drop":
        drop_mask_warning(layer)
    if layer.mask_handling in ("drop", "ignore"):
        return None
    if len(distinct) == 1:
        return distinct[0]
    if layer.mask_handling == "consume" or len({m.sample_shape for m in distinct}) > 1:
        raise ValueError(f"{layer.describe()} was given inputs with different masks, of shapes "
                         f"{[m.shape for m in distinct]}; it combines masks of one shape only")
    from .. import ops  # (clnet.ops imports the layers) Keras's merge: a step holds data where all say so
    combined = distinct[0]
    for mask in distinct[1:]:
        combined = ops.multiply(combined, mask)
    return combined


def checked_mask(layer: "Layer", x: KerasTensor, given) -> KerasTensor:
    """A mask given to a call of `layer` on `x` (its mask argument): a symbolic tensor of x's
    leading axes, or a ValueError naming the shapes."""
    given = tensors_of(given)
    if not isinstance(given, KerasTensor):
        raise TypeError(f"{layer.describe()} was called with mask={given!r}; a mask is a symbolic tensor of the "
                        "input's leading axes, (batch, timesteps), 1 where a step holds data and 0 where it is padding")
    rank = len(given.sample_shape)
    if not given.batched or not 0 < rank < len(x.sample_shape) or given.sample_shape != x.sample_shape[:rank]:
        raise ValueError(f"{layer.describe()} was given a mask of shape {given.shape} for an input of shape "
                         f"{x.shape}; a mask has the input's leading axes, e.g. (batch, timesteps) = "
                         f"{(None, *x.sample_shape[:1])} for a sequence")
    return given


def drop_mask_warning(layer: "Layer") -> None:
    """Keras's warning where a layer that does not support masking is given a mask."""
    warnings.warn(f"Layer '{layer.name}' (of type {type(layer).__name__}) was passed an input with a mask attached "
                  "to it. However, this layer does not support masking and will therefore destroy the mask "
                  "information. Downstream layers will not see the mask.", stacklevel=outside_clnet())


def masked_call(layer: "Layer", tensors: list[KerasTensor], shapes: list[tuple], mask: KerasTensor | None) -> Call:
    """A call of `layer` on `tensors` going on with `mask` (input_mask's): the call reads it where
    the layer consumes masks, and its outputs carry what set_output_masks gives them."""
    call = Call(layer, tensors, shapes, mask=mask if layer.mask_handling == "consume" else None)
    set_output_masks(call, mask)
    return call


def set_output_masks(call: Call, mask: KerasTensor | None) -> None:
    """The masks a call's outputs carry: the one its forward makes (see Layer.makes_mask), or its
    layer's compute_mask of the input's mask."""
    layer = call.layer
    if layer.makes_mask():
        call.made_mask = KerasTensor(call.output.sample_shape[:-1], call)
        call.output._keras_mask = call.made_mask
    elif mask is not None:
        inputs = call.inputs[0] if len(call.inputs) == 1 else list(call.inputs)
        mark_outputs(call.outputs, layer.compute_mask(inputs, mask))


def mark_outputs(outputs: list[KerasTensor], masks) -> None:
    """Give `outputs` the masks compute_mask returned (one, or a list of one per output) where
    they have none, as Keras's: a single mask goes on the first output."""
    masks = list(masks) if isinstance(masks, (list, tuple)) else [masks]
    for tensor, made in zip(outputs, masks):
        if tensor._keras_mask is None and made is not None:
            if not isinstance(made, KerasTensor):
                raise TypeError(f"compute_mask returned {made!r}; a mask is a symbolic tensor or None")
            tensor._keras_mask = made


class ModelMode:
    """What a traced call() gets as `training` when its caller gave none: the model's mode, which
    fit sets to training and evaluate and predict to inference, step by step on the device. Passed
    on to layers (`self.dropout(x, training=training)`) it is what they follow anyway; Python's
    `if training:` cannot be traced (the graph is made once, for both modes) and raises, rather
    than trace the inference branch alone."""

    def __bool__(self):
        raise TypeError("`if training:` in a traced call() cannot be traced: the graph is made once and runs in "
                        "training (fit) and in inference (evaluate, predict). Use layers that follow the model's "
                        "mode (Dropout, GaussianNoise, BatchNormalization), passing training=training along")

    def __repr__(self):
        return "<the model's mode>"


_trace_depth = 0


def tracing() -> bool:
    """Whether a subclass's call() is being traced (arrays are then constants of the graph, and a
    Variable an operand of ops)."""
    return _trace_depth > 0


@contextmanager
def trace_scope():
    global _trace_depth
    _trace_depth += 1
    try:
        yield
    finally:
        _trace_depth -= 1


def is_concrete(structure) -> bool:
    """Arrays (numpy, lists of numbers, clnet Tensors, Variables out of a trace), no symbolic
    tensor: what a layer computes on at once."""
    if isinstance(structure, (int, float)):  # (a bare number is no batch)
        return False
    leaves = leaves_of(tensors_of(structure))
    return bool(leaves) and not any(isinstance(t, KerasTensor) for t in leaves) and all(
        isinstance(t, (np.ndarray, np.generic, Tensor, int, float)) or hasattr(t, "__array__") for t in leaves)


def _is_model(value) -> bool:
    """A clnet Model (a layer may hold one: a Sequential block), known by its layers and weights."""
    return hasattr(value, "weights") and hasattr(value, "layers") and not isinstance(value, Layer)


def tensors_of(structure):
    """`structure` with each Input (a layer that stands for its tensor) as its output tensor, and
    while tracing each Variable as its tensor."""
    if tracing() and getattr(structure, "is_variable", False) and structure.tensor is not None:
        return structure.tensor  # (weight.py's Variable, which subclasses nothing of this file)
    if isinstance(structure, dict):
        return {k: tensors_of(v) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return type(structure)(tensors_of(v) for v in structure)
    if isinstance(structure, Layer) and structure.is_input:
        return structure.output
    return structure


def _taking_trainable(init):
    """A layer class's __init__ that also takes Keras's `trainable` and `dtype` (every Keras layer
    does; `dtype` unless the class takes its own, as Input's tensor dtype), set once the layer is
    made (a subclass's __init__ calling its base's passes none on)."""
    takes_policy = "dtype" not in inspect.signature(init).parameters

    @functools.wraps(init)
    def __init__(self, *args, trainable=True, **kwargs):
        if takes_policy:
            dtype = kwargs.pop("dtype", None)
            try:  # (checked before the layer is made)
                policy = policy_of(dtype)
            except ValueError as e:
                raise ValueError(f"{type(self).__name__}: {e}") from None
        init(self, *args, **kwargs)
        if takes_policy:
            self._dtype_policy = policy
            self.dtype_given = dtype is not None
        if trainable is not True:
            self.trainable = trainable
    return __init__


Layer.__init__ = _taking_trainable(Layer.__init__)


def leaves_of(structure) -> list:
    if isinstance(structure, dict):
        return [leaf for v in structure.values() for leaf in leaves_of(v)]
    if isinstance(structure, (list, tuple)):
        return [leaf for v in structure for leaf in leaves_of(v)]
    return [structure]


def _structure_like(structure, leaves: list):
    """`leaves`, in order, put back into the shape of `structure`."""
    items = iter(leaves)

    def fill(s):
        if isinstance(s, dict):
            return {k: fill(v) for k, v in s.items()}
        if isinstance(s, (list, tuple)):
            return type(s)(fill(v) for v in s)
        return next(items)
    return fill(structure)


def register_custom_objects(custom_objects) -> None:
    """Layer classes of `custom_objects`, {name: class} as Keras's loaders take them, under the names a
    config may give them. A subclass with call() is traced into the layers it is made of and never
    named in a config: it may be given, and is not used."""
    if custom_objects is None:
        return
    if not isinstance(custom_objects, dict):
        raise TypeError(f"custom_objects must be a dict of names to layer classes, got {type(custom_objects).__name__}")
    for name, cls in custom_objects.items():
        if not (isinstance(name, str) and isinstance(cls, type) and issubclass(cls, Layer)):
            raise TypeError(f"custom_objects[{name!r}] must be a clnet Layer class, got {cls!r}")
        if cls.call is Layer.call:
            Layer.registry[name] = cls


_name_counts: dict[str, int] = {}
_reserved: set[str] = set()


def unique_name(stem: str) -> str:
    """`stem`, then stem_1, stem_2, ... on later calls: Keras's automatic names (skipping those
    reserve_names took)."""
    while True:
        count = _name_counts.get(stem, 0)
        _name_counts[stem] = count + 1
        name = stem if count == 0 else f"{stem}_{count}"
        if name not in _reserved:
            return name


def reserve_names(names) -> None:
    """Names a file gives its layers, which automatic names then skip: a model read from Keras's
    config whose merges clnet traces into ops (named automatically) keeps its own names free."""
    _reserved.update(names)


def clear_names() -> None:
    """As `keras.utils.clear_session()` (`clnet.utils.clear_session`): the automatic layer names
    start again, so the next Dense is `dense` once more, and names reserved by files loaded before
    are freed. Only the names: models and layers made before keep working."""
    _name_counts.clear()
    _reserved.clear()


def snake_case(name: str) -> str:
    """A class name as Keras writes it in layer names: BatchNormalization -> batch_normalization,
    LSTM -> lstm, Conv2D -> conv2d."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def layer_label(kind: str, name: str | None) -> str:
    """How a constructor's error names the layer: its class, and its name when one was given."""
    return kind if name is None else f"{kind} {name!r}"


def checked_shape(argument: str, value, lengths: bool = False, scalar: bool = False,
                  empty_axes: bool = False) -> tuple:
    """`value` (an extent, or a tuple or list of them) as a shape of one axis or more, each of a
    positive extent, a sample's as Input and input_shape take it; with `lengths`, None where
    each batch gives the extent (Input((None, 8))); with `scalar`, () too (a weight's, ops.ones's);
    with `empty_axes`, extents of 0 too (ops.ones((0, 3)))."""
    least = 0 if empty_axes else 1
    integers = "non-negative integers" if empty_axes else "positive integers"
    expected = f"{integers} or None (a length each batch gives)" if lengths else integers
    try:
        shape = tuple(None if s is None and lengths else int(s)
                      for s in (value if isinstance(value, (tuple, list)) else (value,)))
    except (TypeError, ValueError):
        raise TypeError(f"{argument} must be a tuple of {expected}, got {value!r}") from None
    if not (shape or scalar) or any(s is not None and s < least for s in shape):
        raise ValueError(f"{argument} must be a tuple of {expected}, got {value!r}")
    return shape


# Extents an axis of None (Input((None, 8))) stands at while the graph is made: a call's output
# shapes are computed at both, and an axis that differs between the two is None too. The graph
# is made again on the data's extents before anything is built (Model).
PROBE_LENGTHS = (1009, 1013)


def has_lengths(shape) -> bool:
    """Whether a sample shape (or a list of them) has an axis of None."""
    if isinstance(shape, list):
        return any(has_lengths(s) for s in shape)
    return shape is not None and any(s is None for s in shape)


def output_shapes(compute, input_shape) -> list[tuple]:
    """compute(input_shape), a call's output shapes; where the input has axes of None, computed at
    each of PROBE_LENGTHS and None wherever the two differ."""
    if not has_lengths(input_shape):
        return compute(input_shape)

    def at(length, shape):
        if isinstance(shape, list):
            return [at(length, s) for s in shape]
        return tuple(length if s is None else s for s in shape)
    first, second = (compute(at(length, input_shape)) for length in PROBE_LENGTHS)
    return [tuple(a if a == b else None for a, b in zip(one, two)) for one, two in zip(first, second)]


def check_weights(layer: Layer, weights, expected: list[tuple]) -> list[np.ndarray]:
    """Weights given to set_weights, checked against the Keras-layout shapes the layer expects."""
    weights = list(weights)
    if len(weights) != len(expected):
        raise ValueError(f"layer {layer.name!r} expects {len(expected)} weight arrays with shapes "
                         f"{expected}, got {len(weights)}")
    arrays = []
    for i, (w, shape) in enumerate(zip(weights, expected)):
        w = np.asarray(w)
        if w.shape != shape:
            raise ValueError(f"layer {layer.name!r} weight {i} must have shape {shape}, got {w.shape}")
        if not np.issubdtype(w.dtype, np.number) or not np.all(np.isfinite(w)):
            raise ValueError(f"layer {layer.name!r} weight {i} must be finite numbers")
        arrays.append(w)
    return arrays
