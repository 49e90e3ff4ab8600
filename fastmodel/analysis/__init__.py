"""Analysis of results shared by the engines: top-k tables (``best``), the one-configuration report
record every engine's report returns (``run_report``), the memory margin (``margin``), validation scores
(``scores``) and the held-out split (``splits``). Each engine's report and validation live in its wing
(results that are not finite numbers become a status in ``kernels/finite.py``). Nothing is imported here.
"""
