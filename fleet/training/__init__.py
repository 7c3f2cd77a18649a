"""Coordinator-side training: the task (model + data), proxy efficiency estimation, pre-training."""
