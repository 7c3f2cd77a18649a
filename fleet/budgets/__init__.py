"""Power budgets on the host: power traces read into schedules, the live budget-file feeder.

The grammar itself (number, word, schedule, live-file line; parse and exact format) is the
kernel's, ``fleet.method.budget``: the board reads budgets with the very same code.
"""
