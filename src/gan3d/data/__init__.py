"""The showers: the calorimeter, the synthetic showers, the HDF5 files and the input pipeline.

* :mod:`~gan3d.data.calorimeter` - the CLIC ECAL's geometry, thresholds and the published fit;
  every other module imports these constants;
* :mod:`~gan3d.data.showers` - synthetic electron showers from the GFLASH parametrisation;
* :mod:`~gan3d.data.files` - shower files in the CLIC HDF5 schema: list, split, read, write, check;
* :mod:`~gan3d.data.generate` - synthetic data sets on disk, in parallel, with a manifest;
* :mod:`~gan3d.data.sharding` - preprocessing and each rank's shard (training and evaluation);
* :mod:`~gan3d.data.sample` - a sample of showers to look at (notebook 01).
"""
