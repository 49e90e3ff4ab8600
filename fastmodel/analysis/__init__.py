"""Analysis of results: top-k tables (``best``) and the rule that turns results that are not finite
numbers into a status (``finite``). Nothing is imported here.
"""
