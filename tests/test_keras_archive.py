"""Keras 3's .keras archives: clnet loads archives Keras wrote (tests/data/keras_archives, made by
tests/make_keras_archive_fixture.py) and predicts as Keras did; writes archives with Keras's
config, weight groups and compile config, which Keras 3 read back and predicted with exactly when
the fixture was made (recorded there); reloads its own; and refuses broken or foreign archives
with an error naming the problem, returning nothing and leaving the previous file in place."""
import io
import json
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import clnet
from clnet.keras_archive import ArchiveError
from clnet.layers import Dense, Input, LocallyConnected1D

HERE = Path(__file__).parent / "data"
FIXTURE = np.load(HERE / "keras_archives.npz")
NAMES = sorted(p.stem for p in (HERE / "keras_archives").glob("*.keras"))


def inputs(name):
    xs = [FIXTURE[f"{name}/x{i}"] for i in range(4) if f"{name}/x{i}" in FIXTURE]
    return xs if len(xs) > 1 else xs[0]


def expected(name):
    return [FIXTURE[f"{name}/y{i}"] for i in range(4) if f"{name}/y{i}" in FIXTURE]


def predictions(model, x):
    p = model.predict(x)
    return list(p.values()) if isinstance(p, dict) else p if isinstance(p, list) else [p]


def weight_datasets(path):
    """{dataset path: shape} of an archive's model.weights.h5, its layers' only."""
    with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5"))) as store:
        found = {}
        store.visititems(lambda n, o: found.update({n: o.shape}) if isinstance(o, h5py.Dataset) else None)
    return {k: v for k, v in found.items() if k.startswith("layers/")}


def test_the_fixture_holds_every_archive():
    assert NAMES == ["attention", "branches", "cnn", "masked_pooling", "masked_sequence", "recurrent", "sequence_ops",
                     "shaping", "traced_merges"]


@pytest.mark.parametrize("name", NAMES)
def test_a_keras_archive_loads_and_predicts_as_keras(name):
    model = clnet.load_model(HERE / "keras_archives" / f"{name}.keras")
    for got, want in zip(predictions(model, inputs(name)), expected(name)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_the_compile_config_comes_with_it():
    model = clnet.load_model(HERE / "keras_archives" / "recurrent.keras")
    assert model.compiled and type(model.optimizer).__name__ in ("RMSprop", "RMSProp")
    assert model.optimizer.get_config()["learning_rate"] == pytest.approx(0.005)
    assert model.loss.name == "binary_crossentropy"
    assert [getattr(m, "name", m) for m in model.metrics] == ["AUC", "accuracy"]
    assert not clnet.load_model(HERE / "keras_archives" / "recurrent.keras", compile=False).compiled


@pytest.mark.parametrize("name", [n for n in NAMES if n != "traced_merges"])
def test_what_clnet_writes_keras_read_and_clnet_reads_again(name, tmp_path):
    """Keras 3 predicted exactly with clnet's archive of each model when the fixture was made; the
    archive clnet writes now has Keras's weight groups and shapes, and loads back in clnet."""
    assert FIXTURE[f"{name}/keras_reads_clnet"] <= 1e-6
    source = HERE / "keras_archives" / f"{name}.keras"
    model = clnet.load_model(source)
    model.save(tmp_path / "again.keras")
    if name != "attention":  # (its TimeDistributed(Dense) is a Dense in clnet, and written as one)
        assert weight_datasets(tmp_path / "again.keras") == weight_datasets(source)
        with zipfile.ZipFile(tmp_path / "again.keras") as mine, zipfile.ZipFile(source) as theirs:
            ours, keras = (json.loads(a.read("config.json")) for a in (mine, theirs))
        # (Keras's config lists the ops that make its masks, NotEqual and Any; clnet's layers make them)
        assert [e["class_name"] for e in ours["config"]["layers"]] == [
            e["class_name"] for e in keras["config"]["layers"] if e["class_name"] not in ("NotEqual", "Any")]
    reloaded = clnet.load_model(tmp_path / "again.keras")
    for got, want in zip(predictions(reloaded, inputs(name)), expected(name)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_a_model_built_in_clnet_round_trips_through_an_archive(rng, tmp_path):
    x = Input((5,))
    model = clnet.Model(x, Dense(2, activation="softmax")(Dense(7, activation="relu")(x)), floatx="float64")
    model.compile(clnet.optimizers.Adam(0.003, 0.8, name="my_adam"), "categorical_crossentropy",
                  metrics=["accuracy", "AUC"])
    data, labels = rng.normal(size=(20, 5)), np.eye(2)[rng.integers(0, 2, 20)]
    model.fit(data, labels, epochs=2, verbose=0)
    model.save(tmp_path / "mine.keras")
    assert zipfile.is_zipfile(tmp_path / "mine.keras")
    loaded = clnet.load_model(tmp_path / "mine.keras")
    assert loaded.dtype == np.float64
    np.testing.assert_array_equal(loaded.predict(data), model.predict(data))
    assert loaded.optimizer.get_config()["learning_rate"] == pytest.approx(0.003)
    # Its name and arguments as Keras writes them (Keras 3.15.1 reads this config back as Adam "my_adam").
    with zipfile.ZipFile(tmp_path / "mine.keras") as archive:
        written = json.loads(archive.read("config.json"))["compile_config"]["optimizer"]
    assert written["class_name"] == "Adam" and written["config"]["name"] == "my_adam"
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert loaded.evaluate(data, labels, return_dict=True) == pytest.approx(model.evaluate(data, labels, return_dict=True))


def test_clnet_s_own_checkpoint_under_a_keras_name_still_loads(rng, tmp_path):
    """Before clnet wrote archives, model.save("x.keras") wrote its HDF5 checkpoint: still read."""
    from clnet.saving import save_model
    model = clnet.Sequential([Input((3,)), Dense(2)])
    model.compile("sgd", "mse")
    save_model(model, tmp_path / "old.keras")
    x = rng.normal(size=(4, 3))
    np.testing.assert_array_equal(clnet.load_model(tmp_path / "old.keras").predict(x), model.predict(x))


# -- bad archives ----------------------------------------------------------------------------
def rewritten(tmp_path, change, name="cnn"):
    """The cnn archive with its parts changed by change(parts) (a dict name -> bytes)."""
    with zipfile.ZipFile(HERE / "keras_archives" / f"{name}.keras") as archive:
        parts = {n: archive.read(n) for n in archive.namelist()}
    change(parts)
    path = tmp_path / "changed.keras"
    with zipfile.ZipFile(path, "w") as archive:
        for n, data in parts.items():
            archive.writestr(n, data)
    return path


def config_with(edit):
    def change(parts):
        config = json.loads(parts["config.json"])
        edit(config)
        parts["config.json"] = json.dumps(config).encode()
    return change


@pytest.mark.parametrize("change, message", [
    (lambda p: p.pop("model.weights.h5"), "not a Keras archive: it has no model.weights.h5"),
    (lambda p: p.pop("config.json"), "it has no config.json"),
    (lambda p: p.update({"model.weights.h5": b"\x89HDF\r\n\x1a\nbroken"}), "model.weights.h5 is not an HDF5 file"),
    (lambda p: p.update({"config.json": b"{not json"}), "config.json is not JSON"),
    (config_with(lambda c: c["config"]["layers"][2].update(class_name="GroupNormalization")),
     "layer 'max_pooling2d' is a Keras GroupNormalization, which clnet does not have"),
    (config_with(lambda c: c["config"]["layers"][1]["config"].update(kernel_regularizer={"class_name": "L2"})),
     r"layer 'conv2d' \(Conv2D\): kernel_regularizer=.* is not supported by clnet"),
    (config_with(lambda c: c["config"]["layers"][-1]["config"].update(units=6)),
     r"layer 'dense' \(Dense\) has weights of shapes \[\(12, 6\), \(6,\)\], but the archive holds \[\(12, 5\), \(5,\)\]"),
    (config_with(lambda c: c["config"]["layers"][1]["config"].update(data_format="channels_first")),
     "data_format='channels_first' is not supported"),
])
def test_a_broken_or_foreign_archive_says_what_is_wrong(tmp_path, change, message):
    with pytest.raises(ArchiveError, match=message):
        clnet.load_model(rewritten(tmp_path, change))


def test_a_truncated_archive_is_refused(tmp_path):
    data = (HERE / "keras_archives" / "cnn.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(data[:len(data) // 2])
    with pytest.raises(ArchiveError, match="not a readable Keras archive"):
        clnet.load_model(tmp_path / "cut.keras")


def test_a_model_keras_cannot_hold_is_refused_and_the_previous_file_stays(tmp_path):
    target = tmp_path / "model.keras"
    shutil.copy(HERE / "keras_archives" / "cnn.keras", target)
    before = target.read_bytes()
    model = clnet.Sequential([Input((6, 2)), LocallyConnected1D(3, 2)])
    with pytest.raises(ValueError, match="is a clnet LocallyConnected1D, which clnet cannot write in Keras's form"):
        model.save(target)
    x = Input((4,))
    traced = clnet.Model(x, clnet.layers.Subtract()([x, Dense(4)(x)]))
    with pytest.raises(ValueError, match=r"an op: clnet.ops, or a merge clnet traces into ops"):
        traced.save(target)
    assert target.read_bytes() == before
    with pytest.raises(ValueError, match="has no Keras name"):
        clnet.Sequential([Input((3,)), Dense(2, activation=clnet.activations.get("lrelu", a=0.05))]).save(target)
    assert target.read_bytes() == before
