"""The real control plane these files share, registered once for the package: a fixture imported
into several test modules is a separate fixture in each (a plane per module). Package-scoped, so a
worker stops its plane when it moves on to other tests, instead of keeping it idling to the end."""

from tests.harness.real_cluster import real_cluster  # noqa: F401
