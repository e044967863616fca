"""Sweeps in the control plane: intake of a sweep file (``intake``), how the children share pins,
slots, the conversion and one selection through their parent's ledger record (``coordination``),
and what the stage operations do for a sweep's runs (``operations``). The records themselves are
the ledger's (``SweepParent``, ``SweepMember`` in ``control.ledger``)."""
