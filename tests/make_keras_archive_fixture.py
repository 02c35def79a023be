"""Writes tests/data/keras_archives/*.keras, archives Keras 3 saved (`model.save`) of models made
of layers clnet has, each trained a step and compiled, and tests/data/keras_archives.npz: each
model's inputs and Keras's predictions, so that tests/test_keras_archive.py checks that clnet loads
them and predicts as Keras does, without importing Keras (CI has no Keras).

Where clnet is importable too (an environment with both), the script also loads each archive with
clnet, saves it again with clnet as .keras, loads that with Keras and records the largest
difference between Keras's predictions of the two ("<name>/keras_reads_clnet"): the evidence,
kept in the fixture, that Keras 3 reads what clnet writes.

    KERAS_BACKEND=torch python tests/make_keras_archive_fixture.py
"""
import os
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # noqa: E402
from keras import layers as L  # noqa: E402

HERE = Path(__file__).parent / "data"


def models():
    """name -> (model, inputs, targets, compile arguments)."""
    rng = np.random.default_rng(5)
    made = {}

    made["cnn"] = (keras.Sequential([
        keras.Input((12, 12, 2)), L.Conv2D(4, 3, activation="relu", padding="same"), L.MaxPooling2D(),
        L.BatchNormalization(), L.Conv2D(3, 2, strides=2), L.ZeroPadding2D(1), L.AveragePooling2D(2),
        L.Flatten(), L.Dropout(0.2), L.Dense(5, activation="softmax")]),
        rng.normal(size=(9, 12, 12, 2)), rng.integers(0, 5, 9),
        dict(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"]))

    made["recurrent"] = (keras.Sequential([
        keras.Input((7,), dtype="int32"), L.Embedding(20, 4), L.Bidirectional(L.LSTM(5, return_sequences=True)),
        L.GRU(3, return_sequences=True), L.SimpleRNN(2, activation="relu"), L.Dense(1, activation="sigmoid")]),
        rng.integers(0, 20, (9, 7)), rng.integers(0, 2, (9, 1)),
        dict(optimizer=keras.optimizers.RMSprop(0.005), loss="binary_crossentropy", metrics=["AUC", "accuracy"]))

    x = keras.Input((6, 8), name="tokens")
    a = L.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True)
    b = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, a]))
    c = L.TimeDistributed(L.Dense(3, activation="gelu"))(b)
    d = L.GlobalAveragePooling1D()(c)
    made["attention"] = (keras.Model(x, [d, L.Dense(1, name="score")(d)]),
                         rng.normal(size=(9, 6, 8)), [rng.normal(size=(9, 3)), rng.normal(size=(9, 1))],
                         dict(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss=["mse", "mae"]))

    # Branches of different depths: the weights' group numbers follow Keras's order of operations.
    p, q = keras.Input((5,), name="p"), keras.Input((3,), name="q")
    deep = L.Dense(4, activation="tanh")(L.Dense(6, activation="relu")(p))
    shallow = L.Dense(4)(q)
    merged = L.Concatenate()([L.Add()([deep, shallow]), L.Multiply()([deep, shallow]), deep])
    out = L.Dense(2, activation="softmax")(L.ReLU(max_value=2.0)(L.Dense(5)(merged)))
    made["branches"] = (keras.Model([p, q], out), [rng.normal(size=(9, 5)), rng.normal(size=(9, 3))],
                        np.eye(2)[rng.integers(0, 2, 9)],
                        dict(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"]))

    # Merges clnet traces into ops: it reads them, and does not write them back in Keras's form.
    p, q = keras.Input((4,)), keras.Input((4,))
    made["traced_merges"] = (keras.Model([p, q], L.Dense(2)(L.Concatenate()([
        L.Subtract()([p, q]), L.Average()([p, q]), L.Maximum()([p, q]), L.Minimum()([p, q]), L.Multiply()([p, q])]))),
        [rng.normal(size=(9, 4)), rng.normal(size=(9, 4))], rng.normal(size=(9, 2)), dict(optimizer="sgd", loss="mse"))

    made["sequence_ops"] = (keras.Sequential([
        keras.Input((10, 3)), L.Conv1D(4, 3, activation="elu"), L.MaxPooling1D(2), L.Permute((2, 1)),
        L.Reshape((16,)), L.RepeatVector(3), L.LeakyReLU(0.1), L.Conv1D(2, 2, padding="causal"), L.ELU(),
        L.GlobalMaxPooling1D(), L.Dense(3), L.Softmax()]),
        rng.normal(size=(9, 10, 3)), np.eye(3)[rng.integers(0, 3, 9)],
        dict(optimizer="adagrad", loss="categorical_crossentropy"))
    made["shaping"] = (keras.Sequential([
        keras.Input((12, 3)), L.Cropping1D((1, 2)), L.UpSampling1D(2), L.SpatialDropout1D(0.2),
        L.Conv1D(4, 3), L.PReLU(shared_axes=[1]), L.Reshape((16, 4, 1)), L.Cropping2D(((1, 1), (0, 1))),
        L.UpSampling2D((1, 2)), L.GaussianNoise(0.1), L.Conv2D(2, 3, strides=2), L.PReLU(alpha_initializer="ones"),
        L.Flatten(), L.Dense(2)]),
        rng.normal(size=(9, 12, 3)), rng.normal(size=(9, 2)), dict(optimizer="adam", loss="mse"))

    # Masks: padded ids (at the end, at the start, in gaps, throughout), a loss per step that reads
    # the mask; and Masking of float steps into a recurrent layer and an average over time.
    ids = rng.integers(1, 12, (9, 8))
    for row, (start, stop) in enumerate([(5, 8), (0, 3), (2, 4), (0, 8), (6, 7)]):
        ids[row, start:stop] = 0
    made["masked_sequence"] = (keras.Sequential([
        keras.Input((8,), dtype="int32"), L.Embedding(12, 4, mask_zero=True),
        L.Bidirectional(L.LSTM(5, return_sequences=True)), L.GRU(3, return_sequences=True, go_backwards=True),
        L.Dense(3, activation="softmax")]),
        ids, rng.integers(0, 3, (9, 8)),
        dict(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"]))
    steps = rng.normal(size=(9, 7, 3))
    steps[0, 4:] = steps[1, :2] = steps[2, 3] = 0.0
    # Functional: Keras's config records the mask's ops (NotEqual, Any) and each layer's mask argument.
    x = keras.Input((7, 3))
    h = L.SimpleRNN(4, return_sequences=True, go_backwards=True)(L.Masking()(x))
    made["masked_pooling"] = (keras.Model(x, L.Dense(1)(L.GlobalAveragePooling1D()(
        L.LSTM(3, return_sequences=True)(h)))), steps, rng.normal(size=(9, 1)), dict(optimizer="adam", loss="mse"))
    return made


def main():
    keras.utils.set_random_seed(0)
    folder = HERE / "keras_archives"
    folder.mkdir(exist_ok=True)
    arrays = {}
    try:
        import clnet
    except ImportError:
        clnet = None
    for name, (model, x, y, compiled) in models().items():
        model.compile(**compiled)
        model.fit(x, y, epochs=1, batch_size=9, verbose=0)
        path = folder / f"{name}.keras"
        model.save(path)
        xs = x if isinstance(x, list) else [x]
        arrays.update({f"{name}/x{i}": np.asarray(v, np.float32) for i, v in enumerate(xs)})
        predicted = model.predict(x, verbose=0)
        for i, p in enumerate(predicted if isinstance(predicted, list) else [predicted]):
            arrays[f"{name}/y{i}"] = p
        if name.startswith("masked"):  # evaluate in batches of 4, and the weights after a step of SGD(1)
            arrays[f"{name}/t0"] = np.asarray(y)
            arrays[f"{name}/evaluate"] = np.array(model.evaluate(x, y, batch_size=4, verbose=0), np.float64)
            stepped = keras.models.clone_model(model)
            stepped.set_weights(model.get_weights())
            stepped.compile(keras.optimizers.SGD(1.0), compiled["loss"])
            stepped.train_on_batch(x, y)
            arrays.update({f"{name}/sgd{i}": w for i, w in enumerate(stepped.get_weights())})
        if clnet is not None and name != "traced_merges":
            with tempfile.TemporaryDirectory() as tmp:
                clnet.load_model(path).save(Path(tmp) / "clnet.keras")
                again = keras.models.load_model(Path(tmp) / "clnet.keras").predict(x, verbose=0)
            again = again if isinstance(again, list) else [again]
            arrays[f"{name}/keras_reads_clnet"] = np.float64(max(
                np.abs(a - b).max() for a, b in zip(again, predicted if isinstance(predicted, list) else [predicted])))
            print(name, "Keras predicts clnet's archive within", arrays[f"{name}/keras_reads_clnet"])
    np.savez_compressed(HERE / "keras_archives.npz", **arrays)
    print(f"wrote {folder} and keras_archives.npz (Keras {keras.__version__}, {keras.backend.backend()}, "
          f"clnet {'present' if clnet else 'absent'})")


if __name__ == "__main__":
    main()
