"""Fleet-level planning: the round's deadline, what-if sweeps over budgets, round energy."""
