"""Lowering: specs + plan -> a structure key, its Program and a parameter table.

``config`` resolves one configuration (local batches, structure key, parameter
row); ``graph`` lowers a structure key to the op graph through the family's
builder in ``stacks``; ``params`` turns specs and swept values into the
kernels' column-major parameter table with a status code per row. Programs
themselves (dense op arrays, their builder) are the shared ``fastmodel.schedule``.
"""
