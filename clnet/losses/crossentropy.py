import numpy as np

from .base import Loss, as_numeric


class CategoricalCrossentropy(Loss):
    """-sum t log p over classes. Targets: one-hot rows, or integer class labels."""
    names = ("categorical_crossentropy", "sparse_categorical_crossentropy", "crossentropy")
    source, mode, folds = "losses/crossentropy.cl", 0, "softmax"

    def prepare_targets(self, y, output_shape, dtype, argument="y"):
        y = as_numeric(y, argument)
        classes = output_shape[-1]
        if y.ndim == 2 and y.shape[1] == 1 and classes > 1:
            y = y[:, 0]
        if y.ndim == 1 and classes > 1:
            labels = y
            if not np.issubdtype(labels.dtype, np.integer):
                if np.any(labels != np.round(labels)):
                    raise ValueError(f"{argument} holds class labels that are not whole numbers; "
                                     f"expected integers in 0..{classes - 1} or one-hot rows")
                labels = labels.astype(np.int64)
            out_of_range = (labels < 0) | (labels >= classes)
            if out_of_range.any():
                i = int(np.argmax(out_of_range))
                raise ValueError(f"{argument} holds label {labels[i]} at index {i}; the model has "
                                 f"{classes} classes, so labels must be in 0..{classes - 1}")
            one_hot = np.zeros((len(labels), classes), dtype)
            one_hot[np.arange(len(labels)), labels] = 1
            return one_hot
        return super().prepare_targets(y, output_shape, dtype, argument)


class BinaryCrossentropy(Loss):
    """mean over outputs of -(t log p + (1 - t) log(1 - p))."""
    names = ("binary_crossentropy",)
    source, mode, folds = "losses/crossentropy.cl", 1, "sigmoid"
