"""Prediction of un-probed profile points from a few measured ones: which points to probe
(`design`), where to probe next (`adapt`), the candidate models of a column (`models`, `fit`), the
choice among them by cross-validation with a power bound (`select`), and the whole table predicted
(`predict`). Rows it writes say `source=predicted`; selection holds budgets to their bound.
"""
