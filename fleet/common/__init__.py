"""Leaves every other package may use: user-facing errors, the safe-name alphabet, plug-in
tables."""
