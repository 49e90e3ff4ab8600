"""MAD-Max sweeps: the engine's sweep plan (:class:`~.definition.Sweep`), its axes, the evaluation of a unit and
its sweep files. The shared machinery that runs any engine's plan is ``fastmodel.sweeps``."""
