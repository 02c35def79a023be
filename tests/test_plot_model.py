"""clnet.utils.plot_model and model_to_dot against Keras 3's (keras/src/utils/model_visualization.py):
the DOT graph (a box per layer, Keras's labels, an edge per input), the files written, and
the ImportError without pydot. The tests that draw need pydot, the file ones Graphviz's dot too."""
import shutil
import sys
import types

import pytest

import clnet
from clnet import layers

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


def two_in_two_out():
    """Two inputs, a Dense called on both (one box, as in Keras), two outputs."""
    a = clnet.Input((8,), name="a")
    b = clnet.Input((8,), name="b")
    shared = layers.Dense(10, activation="relu", name="shared")
    x = layers.Concatenate(name="cat")([shared(a), shared(b)])
    out1 = layers.Dense(1, name="out1")(x)
    out2 = layers.Dense(3, activation="softmax", name="out2")(x)
    return clnet.Model([a, b], [out1, out2], name="two")


def labels_and_edges(dot):
    """{layer name: label} and the sorted (source, destination) edges by layer name; the name is
    the label's first bold text (the class where show_layer_names is off)."""
    labels = {n.get_name(): n.get("label") for n in dot.get_nodes() if n.get_name() not in ("node", "graph", "edge")}
    names = {key: label.split("<b>")[1].split("</b>")[0] for key, label in labels.items()}
    edges = sorted((names[e.get_source()], names[e.get_destination()]) for e in dot.get_edges())
    return {names[key]: label for key, label in labels.items()}, edges


def test_functional_graph():
    pytest.importorskip("pydot")
    model = two_in_two_out()
    dot = clnet.utils.model_to_dot(model, show_shapes=True, rankdir="LR")
    by_name, edges = labels_and_edges(dot)
    assert sorted(by_name) == ["a", "b", "cat", "out1", "out2", "shared"]
    # The shared layer once, with one edge from each input; the edges as Keras's (one per pair).
    assert edges == [("a", "shared"), ("b", "shared"), ("cat", "out1"), ("cat", "out2"), ("shared", "cat")]
    assert "<b>shared</b> (Dense)" in by_name["shared"]
    # Keras's shapes, batch axis None; the input shape of the first call; an Input its output alone.
    assert "Input shape: <b>(None, 8)</b>" in by_name["shared"] and "Output shape: <b>(None, 10)</b>" in by_name["shared"]
    assert "Input shape: <b>[(None, 10), (None, 10)]</b>" in by_name["cat"]
    assert "Output shape: <b>(None, 3)</b>" in by_name["out2"]
    assert "Input shape" not in by_name["a"] and "Output shape: <b>(None, 8)</b>" in by_name["a"]
    text = dot.to_string()
    assert "rankdir=LR" in text and "dpi=200" in text and "splines=ortho" in text and "concentrate=true" in text
    # Keras's model_to_dot names layers by default; without shapes, no shape row.
    plain = clnet.utils.model_to_dot(model, show_layer_names=False).to_string()
    assert "rankdir=TB" in plain and "shape" not in plain.replace("shape=record", "")
    assert "<b>Dense</b>" in plain and "<b>shared</b>" not in plain


def test_label_options():
    pytest.importorskip("pydot")
    model = two_in_two_out()
    dot = clnet.utils.model_to_dot(model, show_dtype=True, show_layer_activations=True, show_trainable=True)
    by_name = labels_and_edges(dot)[0]
    assert "Activation: <b>relu</b>" in by_name["shared"] and "Activation: <b>softmax</b>" in by_name["out2"]
    assert "Output dtype: <b>float32</b>" in by_name["cat"]
    assert "<b>Trainable</b>" in by_name["out1"] and "Trainable" not in by_name["cat"]  # (no weights: no cell)
    with pytest.raises(ValueError, match="layer_range"):
        clnet.utils.model_to_dot(model, layer_range=["a", "cat"])


def test_sequential_chain():
    pytest.importorskip("pydot")
    model = clnet.Sequential([clnet.Input((4,)), layers.Dense(6, name="d1"), layers.Dense(2, name="d2")])
    by_name, edges = labels_and_edges(clnet.utils.model_to_dot(model, show_shapes=True))
    assert sorted(by_name) == ["d1", "d2"]  # no Input box, as Keras's Sequential
    assert edges == [("d1", "d2")]
    assert "Input shape: <b>(None, 6)</b>" in by_name["d2"] and "Output shape: <b>(None, 2)</b>" in by_name["d2"]
    with pytest.raises(ValueError, match="has not yet been built"):
        clnet.utils.plot_model(clnet.Sequential([layers.Dense(2)]))


@needs_dot
def test_writes_png_and_dot(tmp_path):
    pytest.importorskip("pydot")
    model = two_in_two_out()
    png = tmp_path / "multi_input_and_output_model.png"
    assert clnet.utils.plot_model(model, png, show_shapes=True) is None  # (no IPython here)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = tmp_path / "model.dot"
    clnet.utils.plot_model(model, to_file=str(text))  # the extension picks the format
    written = text.read_text()
    assert written.lstrip().startswith("digraph") and "<b>Dense</b>" in written and "<b>shared</b>" not in written


def test_without_pydot(monkeypatch):
    for name in ("pydot", "pydot_ng", "pydotplus"):  # an import of each raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "IPython.core.magics.namespace", raising=False)
    model = two_in_two_out()
    with pytest.raises(ImportError) as error:
        clnet.utils.plot_model(model)
    assert str(error.value) == "You must install pydot (`pip install pydot`) for `plot_model` to work."
    with pytest.raises(ImportError, match=r"for model_to_dot to work\.$"):
        clnet.utils.model_to_dot(model)


def test_without_pydot_in_ipython(monkeypatch, capsys):
    # In a notebook Keras prints the message and returns None, so that the notebook runs on.
    for name in ("pydot", "pydot_ng", "pydotplus"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "IPython.core.magics.namespace", types.ModuleType("namespace"))
    assert clnet.utils.plot_model(two_in_two_out()) is None
    assert "You must install pydot (`pip install pydot`) for `plot_model` to work." in capsys.readouterr().out
