"""The closed loop on the board: train under a budget that may change, re-select (b, f) when
the budget, the deadline or the learnt efficiency says so, guard the rail, and log what ran
(`closedloop` and the parts it is made of: `budgetwatch`, `deadline_reselect`, `loop_learning`,
`driftwatch`, `segments`); `underbudget` is the one entry point `powerfleet train` and the agent
share. Equation 4 and the budget grammar it applies come from the method kernel.
"""
