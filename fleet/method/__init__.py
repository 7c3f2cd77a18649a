"""The method's kernel: what the host and the board must agree on, written once.

The budget grammar (``budget``), the profile row format and the measured point (``profile_io``),
equation 4 / Algorithm 1 with the learning-rate rule (``selection``), the deadline arithmetic
(``deadline``) and the typed, versioned records that cross a process boundary (``records``,
their machinery in ``record_base``). It is the ground floor of the import graph
(docs/architecture.md, layers): Python 3.6 and the standard library only, importing nothing
else of the project, so the agent on a JetPack 4.6 board and the coordinator on Python 3.11 run
the same code.
"""
