"""Lowering: specs + plan -> a structure key, its Program and a parameter table.

``config`` resolves one configuration (local batches, structure key, parameter
row); ``graph`` lowers a structure key to the op graph through the family's
builder in ``stacks``; ``program`` holds the dense op arrays and their builder;
``params`` turns specs and swept values into the kernels' column-major
parameter table with a status code per row; ``pipeline`` builds pipeline
schedules as Programs (the exact path that tests the closed-form bubble).
"""
