"""Programs for the shared list scheduler (``kernels/schedule.py``): ``program`` holds the dense op arrays,
their CSR dependencies and their builder. Both the MAD-Max lowering and the real-world exact pipeline path
build Programs. Nothing is imported here."""
