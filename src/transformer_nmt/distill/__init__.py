"""`nmt distill`: a small, fast student from any teacher, in resumable stages (sequence-level
knowledge distillation, Kim & Rush 2016). `options` holds what the command line sets and
imports no torch, so that `nmt --help` stays fast; `pipeline` runs the stages."""
