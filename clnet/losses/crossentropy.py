import numpy as np

from ..cl.runtime import EXACT_INTEGERS
from .base import Loss, as_numeric


class _Crossentropy(Loss):
    """What the cross-entropies share: `from_logits=True`, as Keras: the outputs are logits (a
    final Dense without activation) and the loss applies the softmax (sigmoid) itself, inside its
    kernel, where it is exact for logits far from 0."""

    def __init__(self, from_logits=False):
        if not isinstance(from_logits, (bool, np.bool_)):
            raise TypeError(f"{type(self).__name__} from_logits must be True or False, got {from_logits!r}")
        self.from_logits = bool(from_logits)

    def program(self, rt, dtype, defines=None):
        return super().program(rt, dtype, {**(defines or {}), "FROM_LOGITS": int(self.from_logits)})

    def can_fold(self, activation):
        return not self.from_logits and super().can_fold(activation)

    def get_config(self):
        return {"name": self.name, "from_logits": True} if self.from_logits else self.name


class CategoricalCrossentropy(_Crossentropy):
    """Keras's `CategoricalCrossentropy` (`"categorical_crossentropy"`): -sum t log p over the last
    axis, averaged over the other axes and the batch (Keras's reduction). Targets: one-hot rows, or
    integer class labels (made one-hot on the host). `from_logits=False`: a bool; True where the
    outputs are logits (a final Dense without activation), the max-subtracted softmax then taken
    inside the loss kernel. At a softmax output the loss takes the softmax's derivative into its
    own gradient. Keras's `label_smoothing`, `axis` and `reduction` are not taken."""
    names = ("categorical_crossentropy", "crossentropy")
    source, mode, folds = "losses/crossentropy.cl", 0, "softmax"

    def prepare_targets(self, y, output_shape, dtype, argument="y"):
        y = as_numeric(y, argument)
        classes = output_shape[-1]
        if classes > 1 and y.shape[1:] in (tuple(output_shape[:-1]), (*output_shape[:-1], 1)):
            labels = class_ids(y, output_shape, argument)
            one_hot = np.zeros((labels.size, classes), dtype)
            one_hot[np.arange(labels.size), labels.ravel()] = 1
            return one_hot.reshape(len(y), -1)
        return super().prepare_targets(y, output_shape, dtype, argument)


class SparseCategoricalCrossentropy(CategoricalCrossentropy):
    """Keras's `SparseCategoricalCrossentropy` (`"sparse_categorical_crossentropy"`): categorical
    cross-entropy with integer class ids as targets, one per position: (samples,) for a (classes,)
    output, (samples, time) for (time, classes). The ids go to the device as they are (one number
    per token, not a one-hot row), in the model's float type, so float32 takes up to 2^24 classes.
    `from_logits=False`: a bool; True where the outputs are logits, the softmax then taken inside
    the loss kernel. Keras's `ignore_class`, `axis` and `reduction` are not taken."""
    names = ("sparse_categorical_crossentropy",)
    mode = 2

    def prepare_targets(self, y, output_shape, dtype, argument="y"):
        y = as_numeric(y, argument)
        labels = tuple(output_shape[:-1])
        if y.ndim < 1 or y.shape[1:] not in (labels, (*labels, 1)):
            raise ValueError(f"{argument} has shape {y.shape}, but loss {self.name!r} on the model's output "
                             f"(samples, {', '.join(map(str, output_shape))}) expects integer class ids of shape "
                             f"(samples{''.join(f', {n}' for n in labels)}); for one-hot targets use "
                             "'categorical_crossentropy'")
        limit = EXACT_INTEGERS[np.dtype(dtype)]
        if output_shape[-1] > limit:
            raise ValueError(f"loss {self.name!r}: the model's output has {output_shape[-1]} classes, but class "
                             f"ids in {np.dtype(dtype).name} are exact only below {limit}; use floatx='float64'")
        return class_ids(y, output_shape, argument).reshape(len(y), -1).astype(dtype)

    def target_width(self, output_shape):
        return int(np.prod(output_shape[:-1]))  # an id per position


def class_ids(y, output_shape, argument) -> np.ndarray:
    """The integer labels in y, checked to be whole numbers in 0..classes-1."""
    classes = output_shape[-1]
    labels = y
    if not np.issubdtype(labels.dtype, np.integer):
        if np.any(labels != np.round(labels)):
            raise ValueError(f"{argument} holds class labels that are not whole numbers; "
                             f"expected integers in 0..{classes - 1} or one-hot rows")
        labels = labels.astype(np.int64)
    out_of_range = (labels < 0) | (labels >= classes)
    if out_of_range.any():
        where = np.unravel_index(int(np.argmax(out_of_range)), labels.shape)
        index = where[0] if labels.ndim == 1 else tuple(int(i) for i in where)
        raise ValueError(f"{argument} holds label {labels[where]} at index {index}; the model has "
                         f"{classes} classes, so labels must be in 0..{classes - 1}")
    return labels


class BinaryCrossentropy(_Crossentropy):
    """mean over outputs of -(t log p + (1 - t) log(1 - p)); with from_logits, of the same for
    p = sigmoid(z), taken as max(z, 0) - t z + log(1 + exp(-|z|))."""
    names = ("binary_crossentropy",)
    source, mode, folds = "losses/crossentropy.cl", 1, "sigmoid"
