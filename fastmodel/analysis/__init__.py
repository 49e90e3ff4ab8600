"""Analysis of results: top-k tables (``best``), the human-readable report of one
configuration (``report``), validation against measured runs (``validate``,
``serve_validate``). Nothing is imported here.
"""
