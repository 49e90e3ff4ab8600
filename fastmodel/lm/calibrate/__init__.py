"""Calibration: fit a cluster's efficiencies to measured runs, and apply the fitted overlay.

- ``overlay``: the TOML calibration file (read, check, apply, write).
- ``fit``: least squares on log step time, coarse search through the vectorized engine, then refinement.
- ``report``: before / after / cross-validated error tables and the fitted values.

Nothing fitted is applied unless a calibration is passed explicitly (``--calibration``).
"""

from fastmodel.lm.calibrate.overlay import Calibration, apply_calibration, parse_calibration, read_calibration  # noqa: F401

__all__ = ["Calibration", "apply_calibration", "parse_calibration", "read_calibration"]
