"""A run's record and the pure rules over it: the models and state machine (``record``), who drives
a run (``ownership``), which retry budget pays for a failure (``budgets``), and what plan, a
launch and a status read change in the record (``plan_record``, ``launch_record``,
``phase_record``, with ``results`` and ``pricing``); ``recorded`` reads the record's free-form
parts (the request as recorded, the evaluations, the pinned data) as types.

The control plane stores the record (``control.lifecycle.ledger``, compare-and-swap); every layer reads it
from here."""
