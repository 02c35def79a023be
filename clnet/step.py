"""The compiled step: what compile() chooses (a loss, weight and metrics per output, the
optimizer) bound to a built graph's runs, and one step of it on the device, as Keras's
train_step / test_step / predict_step. fit, evaluate and predict (trainer.py) run these, and so do
the distributions (clnet/distribute: each replica's compute_loss and backward on its shard, the
reduction, each replica's update).

A training step: forward (the runs in order), the loss kernel per output (its gradient, times a
LossScaleOptimizer's dynamic scale where the optimizer is one, and the per-sample loss and hits of
the epoch), backward (the runs in reverse, each adding its input gradients into the tensors it
read; fan-out sums in buffers of the step's), the optimizer's update: no host read. The graph
(model.py) gives the step its runs, inputs, outputs and parameter ranges."""
from __future__ import annotations

from collections import namedtuple
from contextlib import nullcontext

import numpy as np

from . import losses, metrics as metrics_module, optimizers
from .cl import runtime as cl_runtime
from .cl.tensor import Tensor
from .layers.base import Call, KerasTensor
from .layers.merge import merge_program
from .losses.base import SOFTMAX_HERE

# One batch on the device, as a step takes it: x (rows, all inputs' features side by side) and
# y (rows, all outputs' target columns, or None to predict), its rows, where its per-sample loss
# and hits go among the epoch's (`first`), and whether y ends with a column of sample weights
# (`weighted`: fit's sample_weight or class_weight, see prepare_targets).
DeviceBatch = namedtuple("DeviceBatch", ["x", "y", "rows", "first", "weighted"], defaults=[0, False])


class NotCompiledError(ValueError, RuntimeError):
    """A model was asked to `fit`, `evaluate`, `train_on_batch`, `test_on_batch` or
    `compute_gradients` before `compile(optimizer, loss)`. A ValueError and a RuntimeError, so either
    `except` catches it."""


class Step:
    """The compiled step of a Model (a mixin of it; see model.py for the graph it reads)."""

    _trainability_stale = False  # a layer was frozen or unfrozen since the last step (Model.apply_trainability)

    # -- the step, as Keras's: what fit, evaluate, predict and the distributions run --------------
    def train_step(self, data: DeviceBatch) -> None:
        """One training step on a batch on the device, as Keras's train_step: compute_loss in
        training mode, backward, and under a distribution its other replicas' steps and the
        gradient reduction, then the optimizer's update. Everything is enqueued; nothing is read
        back (fit reads the logs when it shows them)."""
        self.compute_loss(data, training=True, scale_loss=True)
        reads = None if self.distribution is None else self.distribution.gradient_reads(self)
        self.backward(data, reads)
        if self.distribution is not None:  # the other replicas' steps, the gradient reduction
            self.distribution.synchronize(self)
        self.optimizer.step()
        # Hand the step to the device now: NVIDIA's driver holds enqueued kernels until a flush,
        # so without one the device idled while Python queued the next step.
        self.rt.queue.flush()

    def test_step(self, data: DeviceBatch) -> None:
        """The loss (and metrics) of a batch in inference mode, into the epoch's statistics."""
        self.compute_loss(data, training=False)

    def predict_step(self, data: DeviceBatch) -> list[Tensor]:
        """The outputs of a batch in inference mode: device tensors (rows of capacity), in order."""
        return self._forward(data.x, data.rows)

    def compute_loss(self, data: DeviceBatch, training: bool = False, scale_loss: bool = False) -> None:
        """The forward pass and each output's loss kernel: the gradient at the outputs, and the
        per-sample loss and hits at [first, first + rows) of the epoch's statistics.
        `scale_loss`: the gradient is of the loss times the optimizer's loss scale, where it is a
        LossScaleOptimizer (what Keras's train_step does with optimizer.scale_loss; the loss
        recorded is not scaled)."""
        if training and self._trainability_stale:  # (a layer was frozen or unfrozen)
            self.apply_trainability()
        self.reserve_statistics(data.first + data.rows)
        self._forward_loss(data.x, data.y, data.rows, data.first, training, data.weighted, scale_loss)

    def backward(self, data: DeviceBatch, gradient_reads=None, input_gradients: bool = False) -> list:
        """The parameters' gradients of the last compute_loss (in their stores); with
        `input_gradients`, dL/d(input) per model input is returned too (else Nones).
        `gradient_reads`: a distribution's hand-over of gradients as layers finish them."""
        return self._backward(data.rows, self._needs_input_grad(input_gradients), gradient_reads)

    def prepare_targets(self, y, name: str = "y", sample_weight=None, class_weight=None) -> np.ndarray:
        """y checked by each output's loss (Keras's rules: one array, a list in output order or a
        dict by output name) and laid out as a step takes it: (samples, all outputs' columns),
        then, where `sample_weight` (one non-negative number per sample, for every output) or
        `class_weight` ({class: weight}, a model of one output; Keras's rule: the class of a
        one-hot row is its argmax, of one column its rounded value) is given, a column of each
        sample's weight (then the batches are `weighted`: the losses are weighted, compile's
        metrics not, as Keras's)."""
        if len(self._heads) == 1:
            if isinstance(y, (list, tuple)) and len(y) == 1 and not np.isscalar(y[0]):
                y = y[0]  # Keras takes [y] for a model of one output
            raw = y
            self._heads[0].note_targets(np.shape(y)[1:])
            y = self._heads[0].loss.prepare_targets(y, self._heads[0].shape, self.dtype, name)
        else:
            given = by_name(y, self.output_names, name, "output")
            for head, (_, part) in zip(self._heads, given):
                head.note_targets(np.shape(part)[1:])
            parts = [head.loss.prepare_targets(part, head.shape, self.dtype, f"{name}[{key!r}] (output {head.name!r})")
                     for head, (key, part) in zip(self._heads, given)]
            if len({len(p) for p in parts}) > 1:
                raise ValueError(f"the arrays of {name} have {[len(p) for p in parts]} samples; they must match")
            y = np.concatenate(parts, axis=1)
        if sample_weight is not None and class_weight is not None:
            raise ValueError("You cannot `class_weight` and `sample_weight` at the same time.")  # (Keras's words)
        if class_weight is not None:
            if len(self._heads) > 1:
                raise ValueError("`class_weight` is only supported for Models with a single output.")
            sample_weight = _class_weights(raw, class_weight, self._heads[0].shape[-1])
        if sample_weight is None:
            return y
        return np.concatenate([y, _sample_weights(sample_weight, len(y), self.dtype)[:, None]], axis=1)

    # -- compiling ---------------------------------------------------------------------------
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, distribution=None,
                loss_weights=None, weighted_metrics=None, auto_scale_loss=True) -> None:
        """As Keras's compile, with its defaults (RMSprop; a loss must be named: without one this raises, where
        Keras's fit would, since clnet trains only on compiled losses). A model of several outputs takes
        `loss` and `loss_weights` as one for all, a list in output order or a dict by output name, and
        `metrics` and `weighted_metrics` (weighted by fit's and evaluate's sample weights; named
        weighted_<name> where `metrics` has the name too, as Keras) as a list per output or a dict by output
        name; the loss it minimises is the weighted sum of its outputs' losses. `distribution`: a
        clnet.distribute strategy (default: the one whose scope() is open). `auto_scale_loss`: as
        Keras, a model whose dtype_policy is "mixed_float16" trains with its optimizer wrapped in a
        LossScaleOptimizer (one given already is not wrapped again)."""
        from .distribute import Distribution, current
        if distribution is not None and not isinstance(distribution, Distribution):
            raise TypeError(f"distribution must be a clnet.distribute strategy (DataParallel, MPIDataParallel) "
                            f"or None, got {distribution!r}")
        names = self.output_names if self._outputs else ["output"]  # (a Sequential or subclass: one, named when built)
        if isinstance(loss, dict) and "name" in loss and "name" not in names:  # a loss's own config
            loss = losses.get(loss)
        self._losses = _per_output(loss, names, "loss", _loss)
        self._loss_weights = _per_output(loss_weights, names, "loss_weights", _loss_weight)
        for argument, given in (("metrics", metrics), ("weighted_metrics", weighted_metrics)):
            if given is not None and len(names) > 1 and not isinstance(given, dict) and not (
                    isinstance(given, (list, tuple)) and all(isinstance(m, (list, tuple)) or m is None for m in given)):
                raise ValueError(f"{argument} of a model of several outputs {names} must be a dict by output name or "
                                 f"a list of one list per output, as Keras's; got {given!r}")
        self._metrics = _per_output(metrics, names, "metrics", _metric_list, listed=len(names) > 1)
        self._weighted_metrics = _per_output(weighted_metrics, names, "weighted_metrics", _metric_list,
                                             listed=len(names) > 1)
        self.optimizer = optimizers.get(optimizer)
        if not isinstance(auto_scale_loss, (bool, np.bool_)):
            raise TypeError(f"auto_scale_loss must be True or False, got {auto_scale_loss!r}")
        if (auto_scale_loss and self.dtype_policy.name == "mixed_float16"
                and not isinstance(self.optimizer, optimizers.LossScaleOptimizer)):
            self.optimizer = optimizers.LossScaleOptimizer(self.optimizer)
        self.loss = self._losses[0] if len(names) == 1 else dict(zip(names, self._losses))
        self.metrics = self._metrics[0] if len(names) == 1 else dict(zip(names, self._metrics))
        self.weighted_metrics = (self._weighted_metrics[0] if len(names) == 1
                                 else dict(zip(names, self._weighted_metrics)))
        self.loss_weights = None if loss_weights is None else dict(zip(names, self._loss_weights))
        self.compiled = True
        self._statistics = None  # (the epoch's per-sample numbers start again with the new losses)
        self.forget_instantiations()
        self.forget_data()  # (the targets are prepared for the losses)
        self._bind()
        self.distribution = distribution or current()
        if self.distribution is not None:
            if len(names) > 1:
                raise ValueError(f"{type(self.distribution).__name__} trains models of one output; model "
                                 f"{self.name!r} has {len(names)} ({names})")
            others = ([m.name for m in self._metrics[0] if m != "accuracy"]
                      + [f"weighted {getattr(m, 'name', m)}" for m in self._weighted_metrics[0]])
            if others:
                raise ValueError(f"{type(self.distribution).__name__} reports the loss and 'accuracy'; metrics "
                                 f"{others} are computed on one device only: compile without them, or "
                                 "evaluate them afterwards without a distribution")
            if self.built and self._frozen():
                raise ValueError(f"{type(self.distribution).__name__} trains every trainable weight, but model "
                                 f"{self.name!r} has layers set trainable = False; train it without a distribution")
            if self.built and self._whole_store is None:
                raise ValueError(f"{type(self.distribution).__name__} reduces a model's parameters as one flat "
                                 f"store, but model {self.name!r} shares layers another model built (their "
                                 "weights stay in that model's store); distribute the model that built them")
            self.distribution.attach(self)

    def _bind_optimizer(self) -> None:
        # A model made again on other lengths trains the same parameters: its optimizer keeps
        # its moments (and step count) where the ranges are the same.
        bound = self.optimizer.ranges if getattr(self.optimizer, "rt", None) is not None else None
        if bound is None or [(id(r.store), r.start, r.size) for r in bound] != [
                (id(r.store), r.start, r.size) for r in self._ranges]:
            self.optimizer.bind(self._ranges, self.rt, self.dtype)

    def _bind(self) -> None:
        if self.built and self.compiled:
            self._bind_optimizer()
            for head, loss, weight, metrics, weighted in zip(self._heads, self._losses, self._loss_weights,
                                                             self._metrics, self._weighted_metrics):
                head.compile(loss, weight, metrics, weighted, loss_scale=self.optimizer.loss_scale)
            self._logit_outputs = {id(head.tensor) for head in self._heads if head.softmax_in_loss}
            if not self._keep_statistics():
                self._statistics, self._stats_size = None, 0

    def _keep_statistics(self) -> bool:
        """A model made again on other lengths within an epoch (its batches' lengths differ) keeps
        the epoch's per-sample numbers: its heads write where the last ones did."""
        kept = getattr(self, "_statistics", None)
        if kept is None or [len(k) for k in kept] != [h.stat_arrays for h in self._heads]:
            return False
        for head, statistics in zip(self._heads, kept):
            head.stats = statistics
        return True

    def rebind_heads(self) -> None:
        """The heads of an instantiation kept for other lengths, taken up again (Model.ensure_built):
        the metrics (shared by every instantiation) bound to its outputs' shapes, the epoch's
        per-sample numbers where they are now."""
        if self.compiled:
            for head in self._heads:
                head.rebind_metrics()
            self._keep_statistics()

    def compile_config(self) -> dict:
        """compile's loss, metrics and loss weights as JSON-able values (a checkpoint's training
        config): compile(optimizer, **compile_config()) compiles the same step again."""
        self.require_compiled("compile_config")
        several = len(self._heads) > 1
        config = {"loss": ({n: l.get_config() for n, l in zip(self.output_names, self._losses)} if several
                           else self._losses[0].get_config()),
                  "metrics": (dict(zip(self.output_names, map(_serialized, self._metrics))) if several
                              else _serialized(self._metrics[0]))}
        if any(self._weighted_metrics):
            config["weighted_metrics"] = (dict(zip(self.output_names, map(_serialized, self._weighted_metrics)))
                                          if several else _serialized(self._weighted_metrics[0]))
        if self.loss_weights is not None:
            config["loss_weights"] = self.loss_weights
        return config

    def _plan(self) -> None:
        """What the step needs of the graph just built (Model.build runs it last): which tensors
        several calls read (their gradients summed into buffers of the step's), the residual sums
        folded into their producers, a loss head per output, the kernels of the sums and of the
        batch's split among several inputs; then compile's choices bound, if compiled already."""
        consumers: dict[int, int] = {}  # calls reading each tensor
        for _, call in self.runs:
            for t in call.inputs:
                consumers[id(t)] = consumers.get(id(t), 0) + 1
        for o in self._outputs:  # an output's loss reads it too
            consumers[id(o)] = consumers.get(id(o), 0) + 1
        producers = {id(t): runner for runner, call in self.runs for t in call.outputs}
        self._fold_residual_sums(producers, consumers)
        # Layers whose output one layer alone reads, with that reader: the reader may take its input
        # in 16 bits from the writer (Layer.take_sixteen_bit_inputs), once their buffers are made.
        self._sixteen_bit_pairs = [(runner, producers[id(t)]) for runner, call in self.runs for t in call.inputs[:1]
                                   if consumers[id(t)] == 1 and id(t) in producers]
        # (one work-group per sample where the lengths may differ from batch to batch, so that
        # every instantiation writes the epoch's per-sample numbers in one layout)
        self._heads = [Head(self.rt, self.dtype, o, name, consumers[id(o)] > 1, one_block=self._pattern is not None)
                       for o, name in zip(self._outputs, self._output_names)]
        # An output's mask (Keras's: its padded steps count in neither its loss nor its metrics).
        self._loss_masks = [o._keras_mask for o in self._outputs]
        self._output_masks = [None] * len(self._outputs)
        # Tensors read by several calls (an output's loss counting as one): their gradient is
        # summed into a buffer of the engine's.
        read = [*self._outputs, *(t for _, call in self.runs for t in call.inputs)]
        self._fan_out = [t for t in {id(t): t for t in read}.values() if consumers[id(t)] > 1]
        program = merge_program(self.rt, self.dtype)
        self._sum = self.rt.kernel(program, "Sum", self.dtype).bind(("a", "b", "out", "total"))
        # (each split fills a buffer of its own, from its start)
        self._split = self.rt.kernel(program, "CopyBlock", self.dtype).bind(
            ("src", "src_stride", "src_offset", "dst", "dst_stride", "width"), dst_offset=0)
        self._input_widths = [int(np.prod(i.input_shape)) for i in self._inputs]
        self.capacity = 0
        self._grad_plans = {}
        self._bind()

    def _fold_residual_sums(self, producers: dict, consumers: dict) -> None:
        """Residual sums folded into a term's producer (Layer.adds_to_output): an Add of two
        tensors, the only reader of one, b, whose producer adds the other, a, ready before it runs
        (an input, or made earlier). Sets self._residuals, id(b's call) -> a, and self._folded,
        id(Add's call) -> b: the Add's output is b's, and it launches nothing. In a transformer
        every block's two residual sums fold into the attention's and the feed-forward's last
        Dense, which spares the tiny GPT its 8 Sum launches."""
        order = {id(i.output): -1 for i in self._inputs}
        order.update({id(t): k for k, (_, call) in enumerate(self.runs) for t in call.outputs})
        self._residuals, self._folded = {}, {}
        calls = {id(call.output): call for _, call in self.runs}
        for runner, call in self.runs:
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
    def reserve(self, rows: int) -> int:
        """Buffers for batches of `rows` rows (they only grow); returns the rows they hold, the
        capacity every batch tensor must have (the first layer reads x^T with that leading
        dimension). Data feeds call it before they gather a batch."""
        if rows > self.capacity:
            # A layer shared with another model may hold more rows already: it never shrinks.
            for layer in [*self._inputs, *(runner for runner, _ in self.runs)]:
                layer.ensure_rows(rows)
            for reader, writer in self._sixteen_bit_pairs:
                reader.take_sixteen_bit_inputs(writer)
            self._grad_sums = {id(t): Tensor((rows, *t.sample_shape), self.dtype, self.rt) for t in self._fan_out}
            self._input_batches = ([Tensor((rows, *i.input_shape), self.dtype, self.rt) for i in self._inputs]
                                   if len(self._inputs) > 1 else [])
            self.capacity = rows
        if self.compiled:
            for head in self._heads:
                head.ensure_rows(self.capacity)
            if getattr(self, "_row_weights", None) is None or self._row_weights.shape[0] < self.capacity:
                self._row_weights = Tensor((self.capacity, 1), self.dtype, self.rt)  # (a weighted batch's)
        return self.capacity

    def reserve_statistics(self, samples: int) -> None:
        """Per-sample loss and accuracy for `samples` of an epoch, in the loss kernel's blocks per sample. A
        stream's epoch grows them as it goes, at least doubling, with a device-side copy of what
        the epoch has written so far."""
        if samples > self._stats_size:
            size = max(samples, 2 * self._stats_size)
            for head in self._heads:
                head.grow_stats(size, self._stats_size)
            self._stats_size = size
            self._statistics = [head.stats for head in self._heads]

    def _needs_input_grad(self, want_input_grad: bool) -> dict[int, list[bool]]:
        """Per call, which of its inputs need a gradient: those downstream of a parameter (or, when
        `want_input_grad`, of a model input)."""
        if want_input_grad not in self._grad_plans:
            upstream = {id(i.output): want_input_grad for i in self._inputs}
            plan = {}
            for runner, call in self.runs:
                # (a mask a layer makes beside its output, which ops may read, has no gradient)
                plan[id(call)] = [upstream.get(id(t), False) for t in call.inputs]
                needed = any(plan[id(call)]) or runner.trainable and any(p.trainable for p in runner.parameters)
                upstream.update({id(t): needed for t in call.outputs})
            self._grad_plans[want_input_grad] = plan
        return self._grad_plans[want_input_grad]

    # -- one batch ---------------------------------------------------------------------------
    def _forward(self, x: Tensor, rows: int, training: bool = False, logits: bool = False) -> list[Tensor]:
        """The outputs for a batch `x` (rows, all inputs' features side by side), in order; with
        `logits`, where an output's loss takes its layer's softmax (Head.softmax_in_loss), that
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
                self._split((width, rows), None, x, total, offset, batch, width, width)
                values[id(layer.output)] = batch
                offset += width
        for runner, call in self.runs:
            folded = self._folded.get(id(call))
            if folded is not None:  # its sum was made by the producer of `folded` (_fold_residual_sums)
                values[id(call.output)] = values[id(folded)]
                continue
            runner.training, runner.step = training, step
            xs = [values[id(t)] for t in call.inputs]
            forward = runner.forward_logits if logits and id(call.output) in self._logit_outputs else runner.forward
            residual = self._residuals.get(id(call))
            added = {} if residual is None else {"add": values[id(residual)]}
            if call.mask is not None:  # (a layer that reads its input's mask)
                added["mask"] = values[id(call.mask)]
            result = forward(xs if runner.multi_input else xs[0], _rows(call, rows), **added)
            if len(call.outputs) == 1:
                values[id(call.output)] = result
            else:  # a list, an output per tensor (a recurrent layer's states)
                values.update({id(t): value for t, value in zip(call.outputs, result)})
            if call.made_mask is not None:
                values[id(call.made_mask)] = runner.output_mask
        self._output_masks = [values[id(m)] if m is not None else None for m in self._loss_masks]
        return [values[id(o)] for o in self._outputs]

    def _forward_loss(self, x: Tensor, target: Tensor, rows: int, first: int, training: bool = False,
                      weighted: bool = False, scale_loss: bool = False) -> None:
        """The forward pass, then the output gradient and per-sample loss/accuracy at [first,
        first + rows). As in Keras the last axis is what a loss compares (the classes), averaged
        over the other axes (time). Where the loss folds the output layer's softmax, the layer
        hands over softmax's input and the loss kernel takes the softmax: one launch fewer per
        step (on a GPU small batches are launch-bound). `weighted`:
        the target's last column is each sample's weight; `scale_loss`: see compute_loss."""
        outputs = self._forward(x, rows, training, logits=True)
        if len(self._heads) == 1 and not weighted:
            self._heads[0].launch(target, outputs[0], rows, first, mask=self._output_masks[0], scaled=scale_loss)
            return
        # The batch's targets lie side by side, an output's after another's, then the weights:
        # each loss reads its own columns.
        offset, total = 0, sum(head.width for head in self._heads) + weighted
        if weighted:
            self._split((1, rows), None, target, total, total - 1, self._row_weights, 1, 1)
        for head, output, mask in zip(self._heads, outputs, self._output_masks):
            self._split((head.width, rows), None, target, total, offset, head.target, head.width, head.width)
            head.launch(head.target, output, rows, first, self._row_weights if weighted else None, mask, scale_loss)
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
            for runner, call in reversed(self.runs):
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

    # -- logs --------------------------------------------------------------------------------
    def epoch_totals(self, count: int) -> tuple[float, float]:
        """Sum of per-sample loss and accuracy over the epoch's first `count` samples of a model of
        one output (a distribution's replica reports its own): the only read of a training loop."""
        return self._heads[0].totals(count)

    def epoch_logs(self, count: int) -> dict:
        """The logs Keras writes: `loss`, the weighted sum of the outputs' losses; with several
        outputs each one's own (`<name>_loss`), then the metrics (`<name>_accuracy`) by name. With
        sample weights, as Keras: a loss is the weighted sum over the samples divided by their
        count; compile's metrics are not weighted."""
        totals = [head.totals(count) for head in self._heads]
        logs = {"loss": sum(head.weight * loss for head, (loss, _) in zip(self._heads, totals)) / count}
        several = len(self._heads) > 1
        if several:
            logs.update({f"{head.name}_loss": loss / count for head, (loss, _) in zip(self._heads, totals)})
        metrics = {f"{head.name + '_' if several else ''}{name}": value
                   for head, (_, hits) in zip(self._heads, totals) for name, value in head.metric_results(hits, count)}
        return logs | dict(sorted(metrics.items()))

    def ordered_logs(self, logs: dict) -> list:
        """The values of evaluate's logs as its list gives them, as Keras's: the loss, each
        output's loss, one output's metrics in the order compile named them (`loss, mse, auc =
        model.evaluate(...)`), then the rest by name (several outputs' metrics)."""
        first = ["loss", *(f"{head.name}_loss" for head in self._heads if len(self._heads) > 1)]
        if len(self._heads) == 1:
            first += self._heads[0].metric_names()
        return [logs[key] for key in first if key in logs] + [logs[key] for key in sorted(logs) if key not in first]

    def training_logs(self, seen: int, running: bool = False) -> dict:
        """The epoch's training logs, over every replica's rows under a distribution (`running`:
        for the progress bar, which only the chief shows)."""
        return self.epoch_logs(seen) if self.distribution is None else self.distribution.logs(self, seen, running)

    def require_compiled(self, what: str) -> None:
        if not self.compiled:
            raise NotCompiledError(f"call compile(optimizer, loss) before {what}()")


class Head:
    """One output as the loss sees it (Keras's per-output loss): its tensor and name, its loss,
    weight and metrics, and its loss kernel's buffers. `consumed`: a layer reads the output too,
    so its gradient is a sum, and its layer's activation stays out of the loss."""

    def __init__(self, rt, dtype, tensor: KerasTensor, name: str, consumed: bool, one_block: bool = False):
        self.rt, self.dtype, self.tensor, self.name, self.consumed = rt, dtype, tensor, name, consumed
        self.shape = tensor.sample_shape
        self.positions = int(np.prod(self.shape[:-1]))  # time steps, or 1
        # The loss kernel's work-groups (Runtime.row_group: a power of two of at most 64 items),
        # enough per sample for its positions (`one_block`: one), each writing its share of the
        # sample's loss.
        self.group = rt.row_group(self.positions)
        self.blocks = 1 if one_block else -(-self.positions // self.group)  # work-groups per sample
        # Keras's mask on the output (a sequence's padded positions count in neither the loss nor
        # the accuracy): one value per position.
        mask = tensor._keras_mask
        self.masked = mask is not None
        if self.masked and mask.sample_shape != self.shape[:-1]:
            raise ValueError(f"the output {tensor.describe()} carries a mask of shape {mask.shape}; a loss takes the "
                             f"mask of its output's positions, of shape {(None, *self.shape[:-1])}")
        # A sequence output whose length may differ from batch to batch (`one_block`) counts its
        # positions as a mask of ones would: the epoch's accuracy is then over every position, as
        # Keras's, not a mean of each batch's.
        self.counts_positions = one_block and self.positions > 1 and not self.masked
        self.held_counted = self.masked or self.counts_positions
        self._ones = None

    def compile(self, loss, weight: float, metrics: list, weighted_metrics: list = (),
                loss_scale: Tensor | None = None) -> None:
        """`metrics`: "accuracy" (the loss kernel's hit) and clnet.metrics.Metric objects;
        `weighted_metrics` likewise, weighted by the batch's sample weights ("accuracy" among
        them: Keras's variant for the loss, computed as a metric of its own). `loss_scale`: a
        LossScaleOptimizer's state (Optimizer.loss_scale), whose scale a training step's
        gradient is multiplied by (the loss kernel built with LOSS_SCALE), or None."""
        rt, dtype, layer = self.rt, self.dtype, self.tensor.call.layer
        self.loss, self.weight, self.loss_scale = loss, weight, loss_scale
        self.width = loss.target_width(self.shape)  # its targets' columns in a batch
        self.fold = self.tensor.index == 0 and not self.consumed and loss.can_fold(layer.output_activation)
        taken = {getattr(m, "name", m) for m in metrics}
        weighted = [metrics_module.accuracy_for(loss.name, self.shape) if m == "accuracy" else m
                    for m in weighted_metrics]
        for metric in weighted:
            metric.weighted = True
            if metric.name in taken:  # Keras's name for a weighted metric that metrics also has
                metric.name = f"weighted_{metric.name}"
        self.metrics = [*metrics, *weighted]
        self.device_metrics = [m for m in self.metrics if m != "accuracy"]
        self.sparse = self.width != int(np.prod(self.shape))  # class ids, not a column per output column
        self.rebind_metrics()
        # fit and evaluate read the output only through the loss (and metrics that need only the
        # order of each row's values): an output layer whose softmax the loss folds may leave the
        # softmax to the loss kernel (see Step._forward_loss).
        self.softmax_in_loss = (self.fold and loss.folds == "softmax" and hasattr(layer, "forward_logits")
                                and not any(m.reads_probabilities for m in self.device_metrics))
        # (without loss scaling, the program of the metrics' kernels below: one build, not two)
        self._kernel = rt.kernel(loss.program(rt, dtype, None if loss_scale is None else {"LOSS_SCALE": 1}),
                                 "CalcOutputGradient", dtype)
        self._bound_for = None  # the (output gradient, stats) buffers its launch was bound to
        self._totals = Tensor((3,), dtype, rt)
        # (the per-sample arrays vary: a kept instantiation's are taken up again, see Step._keep_statistics)
        self._reduce = rt.kernel(loss.program(rt, dtype), "ReduceMetrics", dtype).bind(
            ("sample_loss", "sample_hit", "count", "sample_held"), totals=self._totals, counted=int(self.held_counted))
        self._mask_kernel = rt.kernel(loss.program(rt, dtype), "MaskTimesRowWeights", dtype)  # (bound in ensure_rows)
        self.output_grad = self.target = None
        # (per-sample loss, per-sample hits, with a mask per-sample held positions), in the
        # kernel's blocks per sample
        self.stats = None

    def rebind_metrics(self) -> None:
        """Its metrics bound to this output (they keep their state: see Metric.bind)."""
        for metric in self.device_metrics:
            metric.bind(self.rt, self.dtype, self.shape, self.sparse, self.loss.name)
        self.note_targets(self.given_targets)

    given_targets = None  # the sample shape of the targets the user gave last (note_targets)

    def note_targets(self, shape) -> None:
        """The sample shape of the targets as the user gives them ((1,) or () for a class id):
        a Metric of the user's gets y_true in it, as Keras passes y as given."""
        self.given_targets = None if shape is None else tuple(shape)
        for metric in getattr(self, "device_metrics", ()):
            if (metric.on_host and self.given_targets is not None
                    and int(np.prod(self.given_targets)) == int(np.prod(metric.target_shape))):
                metric.target_shape = self.given_targets

    def ensure_rows(self, rows: int) -> None:
        if self.output_grad is None or self.output_grad.shape[0] < rows:
            self.output_grad = Tensor((rows, *self.shape), self.dtype, self.rt)
            # Where a batch holds more than this output's targets (several outputs, sample
            # weights), its columns are copied out of the batch's.
            self.target = Tensor((rows, self.width), self.dtype, self.rt)
            if self.counts_positions:
                self._ones = Tensor.from_numpy(np.ones((rows, self.positions)), self.dtype, self.rt)
            if self.masked:  # (a masked, weighted batch's mask times sample weights, for its metrics)
                self._position_weights = Tensor((rows * self.positions,), self.dtype, self.rt)
                self._mask_weights = self._mask_kernel.bind(("mask", "row_weights", "tokens"), positions=self.positions,
                                                            weights=self._position_weights)

    @property
    def stat_arrays(self) -> int:
        """How many per-sample arrays it keeps: loss, hits, and (with a mask, or positions counted)
        the held positions."""
        return 2 + self.held_counted

    def grow_stats(self, samples: int, kept: int) -> None:
        """Room for `samples`, with a device-side copy of the first `kept` samples' numbers."""
        grown = tuple(Tensor((samples * self.blocks,), self.dtype, self.rt) for _ in range(self.stat_arrays))
        if kept:
            for old, new in zip(self.stats, grown):
                cl_runtime.cl.enqueue_copy(self.rt.queue, new.buffer, old.buffer, byte_count=kept * self.blocks * old.dtype.itemsize)
        self.stats = grown

    def launch(self, target: Tensor, output: Tensor, rows: int, first: int, row_weights: Tensor | None = None,
               mask: Tensor | None = None, scaled: bool = False) -> None:
        """The output's gradient (scaled by its loss weight) and the per-sample loss and hits of
        rows [first, first + rows), each sample's gradient and loss scaled by its weight in
        `row_weights` if given, and each position's by the output's mask (rows, positions);
        `scaled`: the gradient times the loss scale too, if compiled with one.
        As in Keras the last axis is what a loss compares (the classes), averaged over the other
        axes (time). Where the loss takes the output layer's softmax, `output` is the softmax's
        input: one launch fewer per step (on a GPU small batches are launch-bound)."""
        if mask is None and self.counts_positions:
            mask = self._ones
        bound = (self.output_grad, self.stats)
        loss_scaled = self.loss_scale is not None
        if self._bound_for != bound:  # the kernel's arguments named once per set of buffers
            self._launch = self._kernel.bind(
                ("target", "outputs", "first", "unweighted_scale", "row_weights", "weighted", "mask", "masked",
                 *(("scaled",) if loss_scaled else ())),
                gradients=self.output_grad, sample_loss=self.stats[0], sample_hit=self.stats[1],
                sample_held=self.stats[-1], positions=self.positions, blocks=self.blocks, cols=self.shape[-1],
                loss_function=self.loss.mode, fold_activation=SOFTMAX_HERE if self.softmax_in_loss else int(self.fold),
                **({"loss_scale": self.loss_scale} if loss_scaled else {}))
            self._bound_for = bound
        self._launch((rows * self.blocks * self.group,), (self.group,), target, output, first,
                     self.weight / (rows * self.positions), self.output_grad if row_weights is None else row_weights,
                     int(row_weights is not None), self.output_grad if mask is None else mask, int(mask is not None),
                     *((int(scaled),) if loss_scaled else ()))
        # A mask weighs each position of the metrics as a sample weight does (Keras's); weighted
        # metrics of a weighted batch take it times the sample's weight, in one launch.
        masked_weights = None
        if self.masked and row_weights is not None and any(m.weighted for m in self.device_metrics):
            tokens = rows * self.positions
            self._mask_weights((-(-tokens // 64) * 64,), None, mask, row_weights, tokens)
            masked_weights = self._position_weights
        for metric in self.device_metrics:
            if self.masked:
                weights = masked_weights if metric.weighted and masked_weights is not None else mask
                metric.update_batch(target, output, rows, first, weights, per_position=True)
            else:
                metric.update_batch(target, output, rows, first, row_weights)

    def metric_names(self) -> list[str]:
        """The metrics' names in the logs, in compile's order."""
        return [m if m == "accuracy" else m.name for m in self.metrics]

    def metric_results(self, hits: float, count: int) -> list:
        """(name, value) of each metric after `count` samples, in compile's order; `hits`: the
        loss kernel's summed hits (compile's "accuracy")."""
        return [("accuracy", hits / count) if m == "accuracy" else (m.name, m.value()) for m in self.metrics]

    def totals(self, count: int) -> tuple[float, float]:
        """Sum of per-sample loss and accuracy over [0, count). With a mask (or positions counted)
        the accuracy is Keras's over the held positions, given as that mean times `count`."""
        size = self.rt.local_size
        self._reduce((size,), (size,), *self.stats[:2], count * self.blocks, self.stats[-1])
        loss, hits, held = self._totals.numpy()
        if self.held_counted:
            hits = hits / held * count if held else 0.0
        return float(loss), float(hits)


def _sample_weights(sample_weight, samples: int, dtype) -> np.ndarray:
    """fit's sample_weight checked: one finite, non-negative number per sample."""
    weights = np.asarray(sample_weight)
    if weights.dtype == object or not (np.issubdtype(weights.dtype, np.number) or weights.dtype == bool):
        raise TypeError(f"sample_weight must be an array of numbers, got {type(sample_weight).__name__}")
    if weights.ndim == 2 and weights.shape[1] == 1:
        weights = weights[:, 0]
    if weights.shape != (samples,):
        raise ValueError(f"sample_weight must have one weight per sample, shape ({samples},), got {weights.shape}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("sample_weight must hold finite, non-negative numbers")
    return weights.astype(dtype)


def _class_weights(y, class_weight, classes: int) -> np.ndarray:
    """Keras's class_weight_to_sample_weights: each sample's class (a one-hot row's argmax, one
    column's rounded value, an id) weighted by class_weight, 1 where it names none. A key that is
    not a class of the output (0 .. classes - 1; 0 and 1 for one column) raises."""
    if not isinstance(class_weight, dict):
        raise TypeError(f"class_weight must be a dict of class index to weight, got {type(class_weight).__name__}")
    known = range(max(classes, 2))
    for key, value in class_weight.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key not in known:
            raise ValueError(f"class_weight key {key!r} is not a class of the output, whose classes are "
                             f"0 .. {known[-1]}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not np.isfinite(value) \
                or value < 0:
            raise ValueError(f"class_weight[{key!r}] must be a finite, non-negative number, got {value!r}")
    labels = np.asarray(y)
    if labels.ndim > 1:
        labels = np.argmax(labels, axis=-1) if labels.shape[-1] != 1 else labels[..., 0]
    labels = np.round(labels).astype(np.int64)
    if labels.ndim != 1:
        raise ValueError("class_weight needs one class per sample; the targets have several positions per sample "
                         "(give sample_weight instead)")
    return np.array([float(class_weight.get(int(label), 1.0)) for label in labels])


def _rows(call: Call, rows: int) -> int:
    """The rows a call computes: the batch's, or one for a call without a batch axis (of weights
    and constants alone, the same for every sample)."""
    return rows if call.outputs[0].batched else 1


def by_name(value, names: list[str], argument: str, what: str) -> list[tuple]:
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
        raise ValueError(f"{argument} is None: every output of a clnet model trains on a loss named in "
                         "compile(loss=...) (Keras's fit says 'No loss to compute'); clnet computes losses in its own "
                         "kernels and has no add_loss")
    return losses.get(value)


def _loss_weight(value, argument: str) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{argument} must be a non-negative number, got {value!r}")
    return float(value)


def _metric_list(metrics, argument: str) -> list:
    """One output's metrics: "accuracy" (for "accuracy" and "acc": the loss kernel's hit) and
    Metric objects (by Keras's names, as objects or serialized); a name given twice is Keras's
    `name_1`."""
    given = [] if metrics is None else [metrics] if isinstance(metrics, (str, metrics_module.Metric, dict)) \
        else list(metrics)
    chosen, names = [], set()
    for identifier in given:
        try:
            metric = metrics_module.get(identifier)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{argument}: {error}") from None
        if metric == "accuracy":
            if "accuracy" not in names:
                chosen.append(metric)
                names.add("accuracy")
            continue
        if any(metric is m for m in chosen):
            raise ValueError(f"{argument} lists metric {metric.name!r} twice (the same object)")
        base, n = metric.name, 0
        while metric.name in names:
            n += 1
            metric.name = f"{base}_{n}"
        names.add(metric.name)
        chosen.append(metric)
    return chosen


def _serialized(metrics: list) -> list:
    """An output's metrics as JSON (compile_config): names, and Metric objects' class and config."""
    return [m if m == "accuracy" else m.serialize() for m in metrics]

