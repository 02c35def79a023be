import sys
import numpy as np
sys.path.insert(0, "examples")
import tiny_gpt
import clnet
parser, _ = tiny_gpt.arguments([])
args = parser.parse_args(["--blocks", "4", "--d-model", "256", "--context", "256", "--steps", "60"])
vocabulary, (x, y), val, _ = tiny_gpt.data(args)
model = tiny_gpt.build_model(len(vocabulary), 256, 256, 4, 4, 1)
model.compile(clnet.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
model.fit(x[:640], y[:640], batch_size=32, epochs=1, shuffle=False, verbose=0)
with clnet.profile(print_table=False) as p:
    model.fit(x[:1280], y[:1280], batch_size=32, epochs=1, shuffle=False, verbose=0)
steps = 40
total = sum(r[1] for r in p.rows.values())
print(f"kernel time per step {1e3 * total / steps:.2f} ms")
for name, r in sorted(p.rows.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"{name:34s} launches/step {r[0] / steps:6.1f}  ms/step {1e3 * r[1] / steps:7.3f}  TFLOP/s {r[2] / max(r[1], 1e-12) / 1e12:6.1f}")
