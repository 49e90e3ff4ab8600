"""Analysis of results shared by the engines: top-k tables (``best``) and the one-configuration report
record every engine's report returns (``run_report``). Each engine's report and validation live in its wing.
Nothing is imported here.
"""
