"""The real deployment: a Flower SuperLink for the coordinator, one SuperNode per device.

``deployment.deploy`` holds the steps as plain functions (start, wait until healthy, submit with
``flwr run``, poll, stop); ``deployment.cli`` adds ``powerfleet coordinator`` and ``powerfleet
device``; ``deployment.security`` the checks they trust (loopback by resolution, SuperNode keys,
private per-run directories); ``deployment/flower_app`` is the Flower app those runs submit. See
docs/architecture.md for the map.
"""
