"""Running on several processes: Horovod/MPI collectives, launchers, ipyparallel MPI engines.

* :mod:`~gan3d.parallel.runtime` - process settings for MPI and TensorFlow (threads per rank,
  yielding waits, mpirun's binding), read by every room;
* :mod:`~gan3d.parallel.distributed` - every Horovod and MPI call of the package (marked
  ``DISTRIBUTED``); world size 1 is the same code path;
* :mod:`~gan3d.parallel.launch` - ``mpirun`` jobs on this machine that fail fast when a rank fails;
* :mod:`~gan3d.parallel.jobs` - a job on N ranks described by a JSON file (``python -m
  gan3d.parallel.jobs JOB.json``): pinned threads and cores, the task, rank 0's result;
* :mod:`~gan3d.parallel.netns` - a multi-node network emulated on this machine (root): a network
  namespace per rank, shaped links, Horovod over Gloo;
* :mod:`~gan3d.parallel.cluster` - an ipyparallel cluster of MPI *engines* for notebooks, always
  shut down ("engine" means an ipyparallel engine, nothing else, in this package).
"""
