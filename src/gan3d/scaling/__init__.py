"""The paper's performance study: scaling experiments, their probes, timelines and models.

* :mod:`~gan3d.scaling.experiments` - time steps over worker counts, whole runs, all-reduces;
* :mod:`~gan3d.scaling.probes` - the measuring probes run inside each MPI rank (step rate,
  all-reduce times), as jobs of :mod:`gan3d.parallel.jobs`;
* :mod:`~gan3d.scaling.roofline` - the step layer by layer against the machine's roofline;
* :mod:`~gan3d.scaling.energy` - energy per trained shower, measured or estimated (labelled);
* :mod:`~gan3d.scaling.interconnect` - all-reduce over emulated networks against the ring model;
* :mod:`~gan3d.scaling.timeline` - Horovod's timeline split into computation, waiting, all-reduce;
* :mod:`~gan3d.scaling.perfmodel` - the analytic model: compute + ring all-reduce + Amdahl;
* :mod:`~gan3d.scaling.speedup` - the model against the measurements and the paper's numbers;
* :mod:`~gan3d.scaling.topology` - node fabrics: the paper's POWER8 node and this machine.
"""
