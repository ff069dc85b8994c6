"""Training: the run directory, the loop, its schedule, checkpoints, validation and resuming.

`transformer_nmt.train` (the package's API name) is `training.session.train`.
"""
