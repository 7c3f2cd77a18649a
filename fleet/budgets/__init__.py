"""Power budgets: the one codec (number, word, schedule), power traces, the live budget-file
feeder."""
