"""gan3d: distributed Horovod training of 3DGAN, the CERN calorimeter-shower GAN, reproduced.

The package in rooms (the README has one line per module and a picture of how data flows):

* top level (8 modules) - :mod:`~gan3d.cli` (the ``gan3d`` command), :mod:`~gan3d.config`
  (settings and profiles), :mod:`~gan3d.exceptions`, :mod:`~gan3d.io` (the repository root,
  atomic writes, provenance), :mod:`~gan3d.records` (the envelope of every study file),
  :mod:`~gan3d.console` (logging, progress bars and Markdown tables), :mod:`~gan3d.doctor`,
  :mod:`~gan3d.lab`;
* :mod:`gan3d.parallel` - Horovod/MPI collectives, mpirun launches, ipyparallel MPI engines, the
  process settings for MPI and TensorFlow (:mod:`~gan3d.parallel.runtime`);
* :mod:`gan3d.data` - the calorimeter, synthetic showers, HDF5 files, the sharded input pipeline;
* :mod:`gan3d.gan` - the 3DGAN networks, the training step, ``train(config)``, checkpoints, history;
* :mod:`gan3d.scaling` - scaling experiments, timelines, the performance model, the paper's numbers;
* :mod:`gan3d.validation` - shower features, metrics, the physics validation, inference speed;
* :mod:`gan3d.plots` - every figure, in one style;
* :mod:`gan3d.report` - the repository's report: the papermill figure pipeline, the figures' index,
  the claims ledger (it imports every room above; none of them imports it).
"""

import os as _os

# Read by TensorFlow once, at import: set before any submodule can import it (see
# parallel/runtime.py).
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.2.0"
__all__ = ["__version__"]
