"""The ``stage`` function: the operations the workflow calls (plan, launch, status, gate, select,
finish, cleanup), their HTTP mapping, train's log reading, and cancel."""
