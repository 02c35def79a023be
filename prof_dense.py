import os, numpy as np, clnet
from clnet.cl.parameters import ParameterStore
from clnet.layers import Dense
from benchmarks.common import median
import clnet.layers.dense as dense
K = {"forward": "PerceptronFeedForward", "weight_grad": "CalcDeltaWeights", "input_grad": "CalcHiddenGradient"}
rt = clnet.runtime(); rng = np.random.default_rng(0)
orig = dense.split_k
for waves in (2, 8):
    dense.split_k = lambda rt, tiles, n_in, units_p, rows, waves=waves: orig(rt, tiles, n_in, units_p, rows, waves)
    for rows, n_in, units in ((8192, 256, 256), (8192, 256, 1024), (8192, 1024, 256)):
        x = clnet.Tensor.from_numpy(rng.random((rows, n_in), np.float32)); g = clnet.Tensor.from_numpy(rng.random((rows, units), np.float32))
        for t in ((64, 4, 16), (64, 8, 16), (128, 8, 16), (32, 4, 16)):
            tiles = {"VW": 4, "TILE": t[0], "WPT": t[1], "TK": t[2]}
            store = ParameterStore(rt, np.float32); layer = Dense(units, "relu", tiles=tiles); layer.build((n_in,), store, rng); store.allocate(); layer.allocate(rows)
            step = lambda: (layer.forward(x, rows), layer.backward(g, rows, True)); step()
            taken = {k: [] for k in K}
            for _ in range(10):
                with clnet.profile(print_table=False) as p: step()
                for k, name in K.items(): taken[k].append(p.rows[name][1] / p.rows[name][0])
            f = 2.0 * rows * n_in * units
            print(f"waves {waves} {rows}x{n_in}x{units} tiles {t}: " + " ".join(f"{k} {f / median(v) / 1e12:.1f}" for k, v in taken.items()), flush=True)
