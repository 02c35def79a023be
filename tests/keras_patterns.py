"""Models written as Keras's guides write them (Layer subclasses with add_weight, layers made in
__init__ and called in call(), ops on symbolic tensors, a position embedding of ops.arange), as
one text for both frameworks: `build(keras)` takes the framework's module (keras, or clnet with
its layers, ops and activations), as a script whose imports alone change. The fixture script
(make_keras_subclassing_fixture.py) runs it with Keras 3, the test (test_keras_subclassing.py)
with clnet; `parts` names the layers whose weights the two exchange."""


def build(keras):
    layers, ops = keras.layers, keras.ops

    class Affine(layers.Layer):
        """A dense layer from two weights of its own, made when the input's width is known."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal")
            self.offset = self.add_weight(shape=(self.units,), initializer="zeros")

        def call(self, inputs):
            return ops.matmul(inputs, self.kernel) + self.offset

    class Tower(layers.Layer):
        """Affine layers with relu between them, held as attributes."""

        def __init__(self, widths, **kwargs):
            super().__init__(**kwargs)
            self.stages = [Affine(width) for width in widths]

        def call(self, inputs):
            x = inputs
            for stage in self.stages[:-1]:
                x = keras.activations.relu(stage(x))
            return self.stages[-1](x)

    class Tokens(layers.Layer):
        """Token ids embedded, plus an embedding of each position (looked up from ops.arange)."""

        def __init__(self, steps, vocabulary, width, **kwargs):
            super().__init__(**kwargs)
            self.words = layers.Embedding(input_dim=vocabulary, output_dim=width)
            self.places = layers.Embedding(input_dim=steps, output_dim=width)

        def call(self, ids):
            where = self.places(ops.arange(start=0, stop=ops.shape(ids)[-1], step=1))
            return self.words(ids) + where

    class Encoder(layers.Layer):
        """Self-attention and a feed-forward Sequential, each with a residual sum and a norm."""

        def __init__(self, width, heads, hidden, **kwargs):
            super().__init__(**kwargs)
            self.attention = layers.MultiHeadAttention(num_heads=heads, key_dim=width)
            self.feed = keras.Sequential([layers.Dense(hidden, activation="relu"), layers.Dense(width)])
            self.first_norm = layers.LayerNormalization(epsilon=1e-6)
            self.second_norm = layers.LayerNormalization(epsilon=1e-6)

        def call(self, inputs):
            mixed = self.first_norm(inputs + self.attention(inputs, inputs))
            return self.second_norm(mixed + self.feed(mixed))

    def tower_model(features):
        x = keras.Input(shape=(features,))
        tower = Tower([6, 5, 1])
        model = keras.Model(x, tower(x))
        return model, {f"stage{i}": stage for i, stage in enumerate(tower.stages)}

    def text_model(steps, vocabulary, width, heads, hidden, classes):
        ids = keras.Input(shape=(steps,))
        tokens, encoder = Tokens(steps, vocabulary, width), Encoder(width, heads, hidden)
        x = layers.GlobalAveragePooling1D()(encoder(tokens(ids)))
        head = layers.Dense(classes, activation="softmax")
        model = keras.Model(ids, head(x))
        return model, {"words": tokens.words, "places": tokens.places, "attention": encoder.attention,
                       "feed0": encoder.feed.layers[0], "feed1": encoder.feed.layers[1],
                       "first_norm": encoder.first_norm, "second_norm": encoder.second_norm, "head": head}

    def translator(source_tokens, target_tokens, units):
        """A sequence-to-sequence model over sequences of any length (Input((None, tokens))): an
        encoder LSTM's final states start a decoder LSTM, trained with teacher forcing; and
        `sampler()`, its inference models made from the same layers after training (an encoder
        of states, a decoder of one step from given states), as Keras's seq2seq example makes them."""
        source, target = keras.Input(shape=(None, source_tokens)), keras.Input(shape=(None, target_tokens))
        encoder = layers.LSTM(units, return_state=True)
        _, h, c = encoder(source)
        decoder = layers.LSTM(units, return_sequences=True, return_state=True)
        head = layers.Dense(target_tokens, activation="softmax")
        sequence, _, _ = decoder(target, initial_state=[h, c])
        model = keras.Model([source, target], head(sequence))

        def sampler():
            given = [keras.Input(shape=(units,)), keras.Input(shape=(units,))]
            step, step_h, step_c = decoder(target, initial_state=given)
            return keras.Model(source, [h, c]), keras.Model([target, *given], [head(step), step_h, step_c])
        return model, {"encoder": encoder, "decoder": decoder, "head": head}, sampler

    def tickets(vocabulary, tags, departments):
        """The functional guide's ticket shape: two id sequences of any length (Input((None,))),
        embedded and read by LSTMs, concatenated with a tag vector; a priority logit and
        department logits, named outputs."""
        title = keras.Input(shape=(None,), name="title")
        body = keras.Input(shape=(None,), name="body")
        flags = keras.Input(shape=(tags,), name="tags")
        parts = {"title_words": layers.Embedding(vocabulary, 4), "body_words": layers.Embedding(vocabulary, 4),
                 "title_reader": layers.LSTM(5), "body_reader": layers.LSTM(3)}
        x = layers.concatenate([parts["title_reader"](parts["title_words"](title)),
                                parts["body_reader"](parts["body_words"](body)), flags])
        parts["priority"] = layers.Dense(1, name="priority")
        parts["department"] = layers.Dense(departments, name="department")
        model = keras.Model(inputs=[title, body, flags], outputs=[parts["priority"](x), parts["department"](x)])
        return model, parts

    return tower_model, text_model, translator, tickets


def greedy(encoder, decoder, source, start: int, tokens: int, steps: int):
    """Each step's probabilities of decoding `source` (one sample) greedily from token `start`,
    one step at a time: the published example's loop."""
    import numpy as np
    states = encoder.predict(source, verbose=0)
    token, rows = start, []
    for _ in range(steps):
        step = np.zeros((1, 1, tokens))
        step[0, 0, token] = 1.0
        probabilities, h, c = decoder.predict([step, *states], verbose=0)
        rows.append(probabilities[0, -1])
        token, states = int(np.argmax(probabilities[0, -1])), [h, c]
    return np.array(rows)


TOWER = {"features": 4, "rows": 12}
TICKETS = {"vocabulary": 13, "tags": 3, "departments": 4, "rows": 12, "title_steps": 4, "body_steps": 6}
TRANSLATOR = {"source_tokens": 5, "target_tokens": 6, "units": 7, "rows": 12, "source_steps": 4, "target_steps": 5}
TEXT = {"steps": 5, "vocabulary": 11, "width": 6, "heads": 2, "hidden": 7, "classes": 3, "rows": 16}
