"""Data-parallel training: `DataParallel` over several OpenCL devices of one process,
`MPIDataParallel` over the processes of an MPI job (`mpirun -np N python train.py`; Microsoft MPI on
Windows: `mpiexec -n N python train.py`; clnet[mpi]).

    strategy = clnet.distribute.DataParallel(devices=[0, 1])
    with strategy.scope():
        model = clnet.Sequential([...]); model.compile("adam", "mse")
    model.fit(x, y, batch_size=64)              # or model.compile(..., distribution=strategy)
"""
from .base import Distribution, current
from .data_parallel import DataParallel, SlowerThanOneDeviceWarning
from .mpi import CollectiveTimeout, MPIDataParallel

__all__ = ["Distribution", "DataParallel", "MPIDataParallel", "CollectiveTimeout", "SlowerThanOneDeviceWarning",
           "current"]
