"""The services the project starts on one machine, each a :class:`~pipeline.services.daemon.Daemon`."""
