"""Training: the run directory, the loop, its schedule, checkpoints, validation and resuming.

Three words name three scales, here and in every module of the package:
- a run is everything trained into one run directory (training/run.py's `RunPlan`, the
  `RunProgress` its checkpoints carry), over one or more sessions;
- a session is one `train()` call, from a new or resumed state to a limit or a signal
  (training/session.py; config.json records one entry per session, and `train` returns
  a `SessionSummary`);
- a step is one optimizer update (`Trainer.train_step`, whose `StepResult` says what it
  did; `Trainer.step` counts them over the run).

`transformer_nmt.train` (the package's API name) is `training.session.train`.
"""
