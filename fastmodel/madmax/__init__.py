"""The MAD-Max engine (``semantics = "madmax"`` and ``"madmax-fixed"``): exact to the reference.

``families/`` (one module per model family), ``spec/`` (its system, task and model specs and the
reference's JSON formats), ``parallel/`` (plan syntax, device meshes, the legality rule table),
``lowering/`` (specs + plan -> structure key, Program and parameter table), ``engine`` (the one door
into ``kernels/madmax``), ``api`` (one configuration -> Dataset) and ``report``.
Nothing is imported here.
"""
