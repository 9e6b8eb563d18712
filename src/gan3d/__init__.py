"""gan3d: distributed Horovod training of 3DGAN, the CERN calorimeter-shower GAN, reproduced.

Modules, one concept each:

* :mod:`gan3d.config` - frozen dataclass configuration, profiles ``quick`` and ``paper``
* :mod:`gan3d.runtime` - MPI/thread settings that multi-process runs on one machine need
* :mod:`gan3d.distributed` - every Horovod/MPI call, launchers (mpirun, ipyparallel engines)
* :mod:`gan3d.showers` - synthetic electron showers (GFLASH parametrisation)
* :mod:`gan3d.datasets` - HDF5 files in the CLIC schema, input pipeline
* :mod:`gan3d.model` - the 3DGAN generator and discriminator (Keras 3)
* :mod:`gan3d.training` - the Horovod data-parallel training loop
* :mod:`gan3d.scaling` - scaling experiments and performance models
* :mod:`gan3d.physics`, :mod:`gan3d.metrics` - shower features and validation metrics
* :mod:`gan3d.plots` - figures; :mod:`gan3d.pipeline` - the papermill figure pipeline
"""

import os as _os

# Read by TensorFlow once, at import: set before any submodule can import it (see runtime.py).
_os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

__version__ = "0.1.0"
__all__ = ["__version__"]
