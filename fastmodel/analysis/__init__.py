"""Analysis of results shared by the engines: top-k tables (``best``), the one-configuration report
record every engine's report returns (``run_report``) and the rule that turns results that are not finite
numbers into a status (``finite``). Each engine's report and validation live in its wing. Nothing is
imported here.
"""
