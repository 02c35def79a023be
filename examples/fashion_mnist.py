"""Train an MLP on Fashion-MNIST with clnet and print its test accuracy.

    python examples/fashion_mnist.py                 # 10 epochs on the default device
    python examples/fashion_mnist.py --epochs 2      # a quicker look
    CLNET_DEVICE=1 python examples/fashion_mnist.py  # another device (see: python -m clnet devices)
"""
import argparse
import time

import clnet
from clnet.callbacks import Callback
from clnet.layers import Dense, Flatten, Input


class EpochTimer(Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs["seconds"] = time.perf_counter() - self.started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", help="device index or name (default: CLNET_DEVICE, else the first GPU, "
                                         "else the newest PoCL)")
    parser.add_argument("--floatx", default="float32", choices=["float32", "float64"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    if args.device is not None:
        clnet.set_device(args.device)
    (x_train, y_train), (x_test, y_test) = clnet.datasets.fashion_mnist.load_data()
    x_train, x_test = x_train / 255.0, x_test / 255.0

    model = clnet.Sequential([Input((28, 28)), Flatten(), Dense(256, "relu"), Dense(128, "relu"),
                              Dense(10, "softmax")], floatx=args.floatx, seed=args.seed)
    model.compile(clnet.optimizers.Adam(1e-3), "categorical_crossentropy", metrics=["accuracy"])
    model.build((28, 28))
    model.summary()
    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                        callbacks=[EpochTimer()])
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=1000)
    seconds = sorted(history.history["seconds"])
    print(f"test accuracy {accuracy:.4f}  test loss {loss:.4f}  "
          f"seconds per epoch {seconds[len(seconds) // 2]:.2f} (median of {len(seconds)})  "
          f"device {clnet.runtime().info.name}")


if __name__ == "__main__":
    main()
