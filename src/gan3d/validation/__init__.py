"""Is a trained generator physically right? Shower features, metrics, the study, and its speed.

* :mod:`~gan3d.validation.physics` - shower features in pure NumPy, and known distortions;
* :mod:`~gan3d.validation.metrics` - separation power, Wasserstein, classifier test, FPD/KPD;
* :mod:`~gan3d.validation.study` - generators against reference showers per energy bin;
* :mod:`~gan3d.validation.monitors` - a few physics numbers per energy, every training epoch;
* :mod:`~gan3d.validation.sensitivity` - the validator's power against small flaws, by sample size;
* :mod:`~gan3d.validation.speed` - GAN inference speed against the synthetic generator and Geant4.
* :mod:`~gan3d.validation.trend` - the showers a run's trend would need to reach a goal;
* :mod:`~gan3d.validation.longruns` - the long runs' sessions as ``studies/README.md`` records
  them, their numbers from the checkpoints.
"""
