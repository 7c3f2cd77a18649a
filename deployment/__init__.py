"""The real deployment: a Flower SuperLink for the coordinator, one SuperNode per device.

The steps are plain functions, by job: ``deployment.daemons`` the SuperLink's and SuperNodes'
command lines, ``deployment.processes`` starting, health-checking and stopping them,
``deployment.flwr_cli`` the `flwr` CLI (submit with ``flwr run``, poll), ``deployment.deploy``
the coordinator's whole role; ``deployment.cli`` adds ``powerfleet coordinator`` and ``powerfleet
device``; ``deployment.security`` the checks they trust (TLS files, loopback by resolution,
SuperNode keys, private per-run directories); ``deployment/flower_app`` is the Flower app those
runs submit. See docs/architecture.md for the map.
"""
