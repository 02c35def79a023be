"""plot_model and model_to_dot, as Keras 3's keras.utils (keras/src/utils/model_visualization.py):
the model's graph as a pydot graph, one box per layer (a layer called twice once), an edge from
the layer that made each call's input to the layer called; plot_model writes it in the format its
file's extension names (Graphviz's dot renders it). pydot is optional (`pip install clnet[plot]`):
clnet imports without it, and these two raise ImportError, with Keras's messages, when called.

clnet calls a nested model's layers into the outer graph (see Model.__call__), so a nested model
is drawn as its layers whatever expand_nested says."""
import os
import sys

from ..model import Model, Sequential


def _check_built(model) -> None:
    """Keras's check. A functional model has its graph from the start (Keras's is built then; clnet's
    of lengths None, `Input((None,))`, builds when data comes), a Sequential or subclassed one not."""
    if not model.built and (isinstance(model, Sequential) or type(model).call is not Model.call):
        raise ValueError("This model has not yet been built. Build the model first by calling `build()` or by "
                         "calling the model on a batch of data.")


def _pydot():
    """pydot, or one of its older forks as Keras accepts them, or None. Imported when called, not
    with clnet, so that clnet's import costs nothing without it."""
    for name in ("pydot", "pydot_ng", "pydotplus"):
        try:
            return __import__(name)
        except ImportError:
            pass
    return None


def _check_graphviz(pydot) -> bool:
    """Whether Graphviz's dot runs: Keras's test, rendering a blank graph."""
    try:
        pydot.Dot.create(pydot.Dot())
        return True
    except (OSError, getattr(pydot, "PydotException", OSError)):
        return False


def _missing(message: str) -> None:
    # As Keras: in a notebook (IPython) only print, so that a notebook without Graphviz runs on.
    if "IPython.core.magics.namespace" in sys.modules:
        print(message)
    else:
        raise ImportError(message)


def _shape(tensor) -> tuple:
    # Plain ints, so that a numpy integer prints as 10, not np.int64(10).
    return tuple(None if d is None else int(d) for d in tensor.shape)


def _map(structure, fn):
    if isinstance(structure, dict):
        return {k: fn(v) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return [fn(v) for v in structure]
    return fn(structure)


def _format_shape(shape) -> str:
    """As Keras prints it: (None, 10), a list of those, or a dict's items without its braces."""
    if shape is None:
        return "?"
    text = ", ".join(f"{k}: {v}" for k, v in shape.items()) if isinstance(shape, dict) else f"{shape}"
    return text.replace("}", "").replace("{", "")


def _activation_name(activation) -> str:
    return getattr(activation, "name", None) or getattr(activation, "__name__", None) or str(activation)


def _layer_label(layer, floatx, show_layer_names, show_layer_activations, show_dtype, show_shapes,
                 show_trainable) -> str:
    """Keras's HTML-like label: a black title row (name and class, or the class), then the
    activation, then one row of shapes, dtype and trainability, each where asked for."""
    class_name = type(layer).__name__
    colspan = max(1, int(show_dtype) + int(show_trainable) + 2 * int(show_shapes))
    title = f"<b>{layer.name}</b> ({class_name})" if show_layer_names else f"<b>{class_name}</b>"
    table = ('<<table border="0" cellborder="1" bgcolor="black" cellpadding="10">'
             f'<tr><td colspan="{colspan}" bgcolor="black"><font point-size="16" color="white">{title}'
             "</font></td></tr>")
    if show_layer_activations and getattr(layer, "activation", None) is not None:
        table += (f'<tr><td bgcolor="white" colspan="{colspan}"><font point-size="14">'
                  f"Activation: <b>{_activation_name(layer.activation)}</b></font></td></tr>")
    cols = []
    is_input = getattr(layer, "is_input", False)
    if show_shapes:
        input_shape = output_shape = None
        try:  # a layer never called has neither (as in Keras, its shapes show as ?)
            input_shape = None if is_input else _map(layer.input, _shape)
            output_shape = _map(layer.output, _shape)
        except (ValueError, AttributeError):
            pass
        if not is_input:  # Keras's InputLayer shows its output shape alone
            cols.append(f'<td bgcolor="white"><font point-size="14">Input shape: <b>{_format_shape(input_shape)}</b>'
                        "</font></td>")
        cols.append(f'<td bgcolor="white"><font point-size="14">Output shape: <b>{_format_shape(output_shape)}</b>'
                    "</font></td>")
    if show_dtype:
        # clnet computes every layer in the model's float type; an Input holds what it was declared to.
        dtype = None
        try:
            dtype = _map(layer.output, lambda t: (getattr(layer, "input_dtype", None) if is_input else None) or floatx)
        except (ValueError, AttributeError):
            pass
        cols.append(f'<td bgcolor="white"><font point-size="14">Output dtype: <b>{dtype or "?"}</b></font></td>')
    weights = getattr(layer, "weights", None)
    if show_trainable and weights:
        # Keras asks layer.trainable; a clnet layer's weights each say whether they train.
        trainable = getattr(layer, "trainable", any(getattr(w, "trainable", True) for w in weights))
        cols.append('<td bgcolor="forestgreen"><font point-size="14" color="white"><b>Trainable</b></font></td>'
                    if trainable else
                    '<td bgcolor="firebrick"><font point-size="14" color="white"><b>Non-trainable</b></font></td>')
    if cols:
        table += f"<tr>{''.join(cols)}</tr>"
    return table + "</table>>"


def _graph_edges(model) -> list:
    """(source layer, destination layer) of every call, in the order the calls were made: Keras's
    edges from each input tensor's maker to its reader."""
    return [(t.call.layer, call.layer) for call in model.calls for t in call.given_inputs]


def model_to_dot(model, show_shapes=False, show_dtype=False, show_layer_names=True, rankdir="TB",
                 expand_nested=False, dpi=200, subgraph=False, show_layer_activations=False, show_trainable=False,
                 splines="ortho", **kwargs):
    """Convert a model to a `pydot.Dot` (a `pydot.Cluster` named after the model if `subgraph`),
    with Keras's arguments: `rankdir` "TB" plots top to bottom, "LR" left to right; `splines`
    is Graphviz's edge style ("ortho": right angles). A Sequential is drawn as its chain of
    layers, a functional model as its graph, and a subclassed model (one with call()) as one
    box, as Keras draws them."""
    _check_built(model)
    pydot = _pydot()
    if pydot is None:
        raise ImportError("You must install pydot (`pip install pydot`) for model_to_dot to work.")
    if subgraph:
        dot = pydot.Cluster(style="dashed", graph_name=model.name)
        dot.set("label", model.name)
        dot.set("labeljust", "l")
    else:
        dot = pydot.Dot()
        dot.set("rankdir", rankdir)
        dot.set("concentrate", True)
        dot.set("dpi", dpi)
        dot.set("splines", splines)
        dot.set_node_defaults(shape="record")
    if kwargs.pop("layer_range", None) is not None:
        raise ValueError("Argument `layer_range` is no longer supported.")
    if kwargs:
        raise ValueError(f"Unrecognized keyword arguments: {kwargs}")

    floatx = model.dtype.name

    def add_node(layer):
        node = pydot.Node(str(id(layer)), label=_layer_label(
            layer, floatx, show_layer_names, show_layer_activations, show_dtype, show_shapes, show_trainable))
        node.set("fontname", "Helvetica")
        node.set("border", "0")
        node.set("margin", "0")
        dot.add_node(node)

    def add_edge(source, destination):
        ids = str(id(source)), str(id(destination))
        if not dot.get_edge(*ids):  # a layer reading one maker twice (or called twice) gets one edge
            edge = pydot.Edge(*ids)
            edge.set("penwidth", "2")
            dot.add_edge(edge)

    if isinstance(model, Sequential):
        layers = model.layers  # without its Input, as Keras's Sequential
        edges = list(zip(layers, layers[1:]))
    elif type(model).call is not Model.call:  # Keras draws a subclassed model as one box
        add_node(model)
        return dot
    else:
        layers, edges = model.layers, _graph_edges(model)
    for layer in layers:
        add_node(layer)
    for source, destination in edges:
        add_edge(source, destination)
    return dot


def plot_model(model, to_file="model.png", show_shapes=False, show_dtype=False, show_layer_names=False,
               rankdir="TB", expand_nested=False, dpi=200, show_layer_activations=False, show_trainable=False,
               splines="ortho", **kwargs):
    """Draw the model (see model_to_dot) into `to_file`, in the format its extension names (.png
    without one): `plot_model(model, "model.png", show_shapes=True)`. Needs pydot and Graphviz's
    dot; without them raises ImportError (in IPython prints the message and returns None), as
    Keras. Returns an `IPython.display.Image` of the file where IPython is installed (not for
    .pdf), else None."""
    _check_built(model)
    pydot = _pydot()
    if pydot is None:
        return _missing("You must install pydot (`pip install pydot`) for `plot_model` to work.")
    if not _check_graphviz(pydot):
        return _missing("You must install graphviz (see instructions at https://graphviz.gitlab.io/download/) "
                        "for `plot_model` to work.")
    if kwargs.pop("layer_range", None) is not None:
        raise ValueError("Argument `layer_range` is no longer supported.")
    if kwargs:
        raise ValueError(f"Unrecognized keyword arguments: {kwargs}")
    dot = model_to_dot(model, show_shapes=show_shapes, show_dtype=show_dtype, show_layer_names=show_layer_names,
                       rankdir=rankdir, expand_nested=expand_nested, dpi=dpi,
                       show_layer_activations=show_layer_activations, show_trainable=show_trainable,
                       splines=splines)
    to_file = str(to_file)
    extension = os.path.splitext(to_file)[1][1:] or "png"
    dot.write(to_file, format=extension)
    if extension != "pdf":  # as Keras: the image, for a notebook to show in-line
        try:
            from IPython import display
        except ImportError:
            return None
        return display.Image(filename=to_file)
    return None
