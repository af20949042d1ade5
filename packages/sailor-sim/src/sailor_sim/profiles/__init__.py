"""Per-layer profiles: the store, the file format, analytic estimates and their calibration."""
