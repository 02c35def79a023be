"""One rank of the MPI tests in test_distribute.py, run as `mpirun -np 2 python distributed_worker.py MODE OUT`.

train:   20 float64 steps of the test model under MPIDataParallel (batches of BATCH rows, 8 unless
         given), shuffled or not; rank 0 writes the
         weights, the logs and a checkpoint (through ModelCheckpoint, on rank 0 only), then every rank
         resumes from that checkpoint for 5 more steps and rank 0 writes the weights again. With
         LOSS_SCALE (a JSON dict of LossScaleOptimizer's arguments) Adam is wrapped in one, and rank 1
         starts from another scale, which fit replaces with rank 0's as it does the weights.
dp, dp-shuffled, dp-uneven: the same 20 steps under DataParallel in one process (no MPI).
dp-states: an encoder-decoder (an LSTM's final states starting another's, a Bidirectional GRU on the
         decoder's outputs) under DataParallel and on one device; writes both runs' weights.
shared-sum: SharedSum alone on 4 ranks as 2 hosts of 2 (split by rank, as Split_type would split
         2 machines), pieces of awkward sizes, 3 threads; each rank writes what it summed.
loop:    fit called three times (2 epochs, then 1, then 1) on the same arrays; before the third, rank 1
         alone halves its weights, which that fit must replace with rank 0's; each rank writes its
         weights and whether its flat state was kept from one call to the next.
compressed: 5 float32 steps of plain SGD under MPIDataParallel(compression="bf16") (with
         STRATEGY_OPTIONS' other arguments); each rank writes its weights. Then one step of a model
         with BatchNormalization under compression and without: each rank writes the moving
         statistics (which travel whole) and the trainable weights of both.
uneven-data: rank 1 fits on one row fewer than rank 0; every rank must raise before a step.
stuck:   rank 1 stops answering before the third step; rank 0 must raise CollectiveTimeout.
dies:    rank 1 exits before the third step; the job must end with an error.
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("CLNET_QUIET", "1")

import clnet  # noqa: E402
from clnet.layers import GRU, LSTM, Bidirectional, Dense, Flatten, Input  # noqa: E402


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(40, 5)), rng.normal(size=(40, 3))


def make(seed=3, floatx="float64"):
    return clnet.Sequential([Input((5,)), Dense(7, "tanh"), Dense(3)], floatx=floatx, seed=seed)


def shared_sum(out: str) -> None:
    """Rank r's array is rng(r)'s normals, weighted by 0.1·(r + 1); every piece is summed in turn."""
    from mpi4py import MPI

    from clnet.distribute.shared_sum import SharedSum
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    host, local = divmod(rank, 2)
    node, cross = comm.Split(host, rank), comm.Split(local, rank)
    size = 70001
    summer = SharedSum(MPI, node, cross, size, np.float64, threads=3)
    array = np.random.default_rng(rank).normal(size=size)
    weights = [0.1 * (host * 2 + k + 1) for k in range(2)]
    started = [summer.sum(array, start, end, weights) for start, end in [(0, 1), (1, 3), (3, 40000), (40000, size)]]
    for future in [future for futures in started for future in futures] + summer.end_step():
        future.result()
    summer.close()
    np.save(os.path.join(out, f"sum-{rank}.npy"), array)


def data_parallel(mode: str, out: str) -> None:
    """DataParallel over devices 0 and 1 (two PoCL devices, see test_distribute.py): the weights of
    both replicas, the logs, and the kernel launches of an epoch against a single device's."""
    x, y = data()
    clnet.set_device(0)  # the single-device run on the first of the two (CLNET_DEVICE may name another)
    single = make()
    single.compile(clnet.optimizers.Adam(0.01), "mse")
    # The first epoch's launches, and a later one's: every step launches the same kernels.
    single_launches = []
    for _ in range(2):
        launches = single.rt.launches
        single.fit(x, y, batch_size=8, epochs=1, verbose=0)
        single_launches.append(single.rt.launches - launches)
    # (check_speed=False: the launches counted are training's, not a speed check's copy's)
    strategy = clnet.distribute.DataParallel(devices=[0, 1], split=[3, 2] if "uneven" in mode else "even",
                                             reduction="devices" if "devices" in mode else "host", check_speed=False)
    with strategy.scope():
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse")
    launches = model.rt.launches
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0, shuffle=mode not in ("dp", "dp-devices"))
    replica = strategy.replica_models[0]
    np.savez(os.path.join(out, "weights.npz"), *model.get_weights(), loss=history.history["loss"],
             devices=[str(strategy.devices[0].name), str(strategy.devices[1].name)],
             launches=[model.rt.launches - launches, replica.rt.launches, *single_launches],
             reduction_launches=strategy.launches_per_step, on_devices=strategy.on_devices,
             one_context=strategy.one_context)
    np.savez(os.path.join(out, "replica.npz"), *replica.get_weights())


def recurrent_states(out: str) -> None:
    """6 float64 steps of an encoder-decoder, whose states are tensors of the graph read by the
    decoder's call, then a Bidirectional GRU, under DataParallel over devices 0 and 1 and on
    device 0 alone."""
    rng = np.random.default_rng(1)
    xs, y = [rng.normal(size=(16, 3, 2)), rng.normal(size=(16, 4, 3))], rng.normal(size=(16, 2))
    runs = []
    for distribution in (None, clnet.distribute.DataParallel(devices=[0, 1])):
        clnet.set_device(0)
        source, target = Input((3, 2)), Input((4, 3))
        _, h, c = LSTM(3, return_state=True)(source)
        decoded = LSTM(3, return_sequences=True)(target, initial_state=[h, c])
        decoded = Bidirectional(GRU(2, return_sequences=True), merge_mode="ave")(decoded)
        model = clnet.Model([source, target], Dense(2)(Flatten()(decoded)), floatx="float64", seed=3)
        model.compile(clnet.optimizers.Adam(0.01), "mse", distribution=distribution)
        model.fit(xs, y, batch_size=8, epochs=3, verbose=0, shuffle=False)
        runs.append(model.get_weights())
    np.savez(os.path.join(out, "states.npz"), *runs[0], *runs[1])


def compressed(strategy, x, y, out: str) -> None:
    model = make(floatx="float32")
    model.compile(clnet.optimizers.SGD(0.1), "mse", distribution=strategy)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    np.savez(os.path.join(out, f"weights-{strategy.rank}.npz"), *model.get_weights(),
             shared=strategy.shared is not None, on_devices=strategy.replica_sum is not None)
    options = json.loads(os.environ.get("STRATEGY_OPTIONS", "{}"))
    runs = {}
    for compression in ("bf16", None):
        normalized = clnet.Sequential([Input((5,)), Dense(7), clnet.layers.BatchNormalization(), Dense(3)],
                                      floatx="float32", seed=3)
        normalized.compile(clnet.optimizers.SGD(0.1), "mse",
                           distribution=clnet.distribute.MPIDataParallel(**{**options, "compression": compression}))
        normalized.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0)
        runs[str(compression)] = normalized.get_weights()
    np.savez(os.path.join(out, f"normalized-{strategy.rank}.npz"),
             **{f"{name}_{i}": w for name, weights in runs.items() for i, w in enumerate(weights)})


def main(mode: str, out: str) -> None:
    if mode == "dp-states":
        return recurrent_states(out)
    if mode.startswith("dp"):
        return data_parallel(mode, out)
    if mode == "shared-sum":
        return shared_sum(out)
    x, y = data()
    if mode == "uneven-data":  # rank 1 is given one row fewer
        from mpi4py import MPI
        x, y = (x[:-1], y[:-1]) if MPI.COMM_WORLD.Get_rank() == 1 else (x, y)
    if os.environ.get("WORKER_DEVICE") == "local-rank":  # the GPUs in turn (two GPUs, test_distribute.py)
        gpus = [device.index for device in clnet.devices() if device.is_gpu]
        clnet.set_device(gpus[int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]) % len(gpus)])
    # STRATEGY_OPTIONS: MPIDataParallel's other arguments as JSON (bucket_mb, hierarchical);
    # RANK_1_OPTIONS: rank 1's instead.
    from mpi4py import MPI
    options = os.environ.get("RANK_1_OPTIONS") if MPI.COMM_WORLD.Get_rank() == 1 else None
    strategy = clnet.distribute.MPIDataParallel(timeout=float(os.environ.get("TIMEOUT", "60")),
                                                **json.loads(options or os.environ.get("STRATEGY_OPTIONS", "{}")))
    if mode == "compressed":
        return compressed(strategy, x, y, out)
    if mode == "uneven-data":
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse", distribution=strategy)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        return
    if mode == "loop":
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse", distribution=strategy)
        states = []
        for call, epochs in enumerate((2, 1, 1)):
            if call == 2 and strategy.rank == 1:
                model.set_weights([0.5 * w for w in model.get_weights()])
            model.fit(x, y, batch_size=8, epochs=epochs, verbose=0)
            states.append(strategy.state)
        np.savez(os.path.join(out, f"loop-{strategy.rank}.npz"), *model.get_weights(),
                 kept=all(state is states[0] for state in states))
        return
    if mode in ("stuck", "dies"):
        class Stop(clnet.callbacks.Callback):
            def on_batch_begin(self, batch, logs=None):
                if batch == 2 and strategy.rank == 1:
                    time.sleep(3600) if mode == "stuck" else os._exit(3)
        model = make()
        model.compile(clnet.optimizers.Adam(0.01), "mse", distribution=strategy)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[Stop()])
        return
    shuffle = mode == "train-shuffled"
    batch = int(os.environ.get("BATCH", "8"))
    checkpoint = os.path.join(out, "checkpoint.h5")
    loss_scale = os.environ.get("LOSS_SCALE")
    with strategy.scope():
        model = make()
        optimizer = clnet.optimizers.Adam(0.01)
        if loss_scale:
            optimizer = clnet.optimizers.LossScaleOptimizer(optimizer, **json.loads(loss_scale))
        model.compile(optimizer, "mse", metrics=[])
    if strategy.rank:  # fit starts every rank from rank 0's weights (and loss scale)
        model.set_weights([w + 1 for w in model.get_weights()])
        if loss_scale:
            model.optimizer.set_scalar_state({"dynamic_scale": 1.0, "step_counter": 0})
    # A progress bar on rank 0 only (Horovod's habit): its running loss must not wait for the others.
    history = model.fit(x, y, batch_size=batch, epochs=4, verbose=1 if strategy.chief else 0, shuffle=shuffle,
                        callbacks=[clnet.callbacks.ModelCheckpoint(checkpoint)])
    if strategy.chief:
        np.savez(os.path.join(out, "weights.npz"), *model.get_weights(), loss=history.history["loss"])
    np.savez(os.path.join(out, f"weights-{strategy.rank}.npz"), *model.get_weights(), pieces=len(strategy.pieces),
             shared=strategy.shared is not None, on_devices=strategy.replica_sum is not None)
    strategy.comm.Barrier()
    with strategy.scope():  # every rank resumes from the checkpoint rank 0 wrote
        resumed = clnet.load_model(checkpoint)
    resumed.fit(x, y, batch_size=batch, epochs=5, initial_epoch=resumed.epoch, verbose=0, shuffle=shuffle)
    if strategy.chief:
        np.savez(os.path.join(out, "resumed.npz"), *resumed.get_weights())
    if loss_scale:
        state = resumed.optimizer.scalar_state()
        np.savez(os.path.join(out, f"loss-scale-{strategy.rank}.npz"), scale=state["dynamic_scale"],
                 counter=state["step_counter"])
    print(f"rank {strategy.rank} done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
