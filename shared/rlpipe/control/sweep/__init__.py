"""Sweeps in the control plane: the coordinator intake and the stage operations are wired with
(``coordinator``, the hooks of ``control.lifecycle.coordinator``), the intake of a sweep file
(``intake``), how the children share pins, slots, the conversion and one selection through their
parent's ledger record (``coordination``), and an operator's retry of a sweep (``operations``).
The records themselves are the core's (``SweepParent``, ``SweepMember`` in ``core.runs.record``)."""
