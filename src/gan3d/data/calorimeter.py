"""The CLIC electromagnetic calorimeter as 3DGAN sees it: every constant defined once.

Geometry, thresholds, the reference trainer's units and the published fit of the real data's
sampling fraction. Everything else in the package imports these names; nothing repeats the
numbers. Pure Python and NumPy (no TensorFlow, no h5py).

Units: GeV, millimetres; arrays of showers are (N, 25, 25, 25) with depth (layers) last.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "N_CELLS", "N_LAYERS", "SHAPE", "PITCH_MM", "FRONT_LAYERS", "FRONT_W_MM", "BACK_LAYERS",
    "BACK_W_MM", "SILICON_MM", "CELL_THRESHOLD_GEV", "HIT_THRESHOLD_GEV", "NETWORK_SCALE",
    "SAMPLING_FIT_PERCENT", "sampling_fraction_fit",
]

# The readout grid of the real files: 25 x 25 silicon pads of 5.1 mm, 25 layers deep.
N_CELLS = 25  # cells per side of the transverse window
N_LAYERS = 25
SHAPE = (N_CELLS, N_CELLS, N_LAYERS)  # x, y, depth
PITCH_MM = 5.1

# Layer structure (absorber then silicon in every layer): 17 thin, then 8 thick tungsten plates.
FRONT_LAYERS, FRONT_W_MM = 17, 2.4
BACK_LAYERS, BACK_W_MM = 8, 4.8
SILICON_MM = 0.5

# Thresholds, in GeV of visible (silicon) energy per cell.
CELL_THRESHOLD_GEV = 1e-6  # the reference trainer sets cells below this to zero
HIT_THRESHOLD_GEV = 2e-4  # a cell above this counts as a hit (3DGAN's validation practice)

# The reference trainer's preprocessing: the networks see cell energies x 100 (GeV) and primary
# energies / 100 (GeV), so both are of order one.
NETWORK_SCALE = 100.0

# The published 3DGAN fit of ECAL sum / primary energy of the real CLIC data, in percent, as a
# polynomial in E / 100 GeV (highest power first). The trainer's ECAL-sum target of fake showers.
SAMPLING_FIT_PERCENT = (0.0018, -0.023, 0.11, -0.28, 2.21)


def sampling_fraction_fit(energy_gev) -> np.ndarray:
    """The published fit of ECAL sum / primary energy of the real CLIC data.

    ``energy_gev`` (...) GeV; returns a dimensionless float64 array of the same shape: 0.0218 at
    10 GeV falling to 0.0181 at 500 GeV.
    """
    x = np.asarray(energy_gev, dtype=np.float64) / NETWORK_SCALE
    return np.polyval(SAMPLING_FIT_PERCENT, x) / 100.0
