"""Why did it fail: every decision of a phase and a failure class, as ordered lists of named rules.

Kept in the core because everything the rules judge can be plain data (``evidence``): the facts
``cluster.evidence`` reads from Kubernetes objects, the train verdict (``core.train_verdict``), the
output's completeness (``core.layout``), the stage's age and the budgets a round has used
(``core.runs.budgets``). So the rules are pure functions, tested row by row in one table
(tests/core/test_failure_rules.py), and the layers that gather the evidence only gather it:

- ``workload``: a Job or JobSet, its pods and events → its phase and class
  (``cluster.status.summarize`` and the client's missing workload call it);
- ``attempt``: that verdict with the train verdict, the output, the deadline and the budgets →
  what ``stage status`` answers and records (``control.stage.service``, ``core.runs.budgets.classify``);
- ``reported``: the name of the rule that ended a run, for the failures the workflow reports to
  ``finish`` and the run endings decided elsewhere (cancel, sweeps, intake, reconcile).

Each tier is a list; the first rule whose condition holds decides (``verdict.first_match``), and
its name is recorded with the failure (``Attempt.failure_rule``, ``Failure.rule``), which is what
``rlpipe status`` reads to say whether a retry can help.
"""
