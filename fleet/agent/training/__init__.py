"""Fine-tuning to a target accuracy, counting samples, time and energy: the trainer, its
resumable checkpoint and the fingerprint a checkpoint must match, the held-out evaluation every
stop decision is taken on, and the counters and result of one run (`train_state`). Torch lives here
and in `models`; nothing here decides which point to run.
"""
