"""What rlpipe knows of MaxText 0.2.4's configuration, each checked against the installed package
by the programs tier: its config keys (``config_keys``), its models (``model_names``), and how its
config reader reads a ``key=value`` argument (``config_reader``)."""
