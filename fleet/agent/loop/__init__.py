"""The closed loop on the board: train under a budget that may change, re-select (b, f) when
the budget, the deadline or the learnt efficiency says so, guard the rail, and log what ran.
`closedloop.ClosedLoop` coordinates parts that each own their state: the budget follower and
the guard (`budgetwatch`), the deadline re-selector (`deadline_reselect`), the learner hook
(`loop_learning`), the drift watch (`driftwatch`), the segment log (`segments`) and the running
point (`running`); they choose on one `table.Table` and talk through arguments and return
values, never another's private fields. `underbudget` is the one entry point `powerfleet train`
and the agent share. Equation 4 and the budget grammar it applies come from the method kernel.
"""
