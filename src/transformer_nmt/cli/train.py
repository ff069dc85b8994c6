"""`nmt train`, `nmt average` and `nmt plot`: a run directory, its checkpoints averaged
into a model file, and its training curves."""

from __future__ import annotations

import argparse

from transformer_nmt.cli.common import rerunnable_command
from transformer_nmt.cli.flags import add_fields, field_values
from transformer_nmt.config import TrainConfig
from transformer_nmt.errors import UserError
from transformer_nmt.interrupts import sigterm_unwinds, stop_signals_held


def add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model on a prepared data directory (resumable, one CPU to many GPUs)",
        description="Train a Transformer with the paper's regime: Adam (0.9, 0.98, 1e-9), "
        "lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), label smoothing 0.1, "
        "updates of --batch-tokens source and target tokens over all processes. RUN_DIR "
        "receives config.json (every setting used), metrics.jsonl, TensorBoard events and "
        "checkpoints: "
        "checkpoint_<step>.pt every --save-every-minutes and --save-every steps (the newest "
        "--keep-last kept), checkpoint_last.pt and checkpoint_best.pt (best by "
        "--valid-metric, lowest validation NLL by default). Ctrl-C or SIGTERM finishes the "
        "current step, writes a checkpoint and exits 0. "
        "Running the same command again, or --resume RUN_DIR, continues exactly where the "
        "run stopped; a run directory holding another run or other files is refused. "
        "Fine-tuning: --init-from MODEL.pt starts from a trained model's weights, on data "
        "prepared with its vocabulary (nmt prepare ... --vocab MODEL.pt).",
        epilog="settings are applied in order: preset, --config file, --set, then the "
        "dedicated flags. Any model or training setting can be --set by its name in a run's "
        "config.json (e.g. --set dropout=0.2 --set label_smoothing=0; an unknown name is "
        "answered with the list). Several GPUs or "
        "CPU processes: torchrun --nproc_per_node=N -m transformer_nmt.cli train ... "
        "(multi-node: add torchrun's --nnodes and --rdzv-endpoint); every process trains "
        "on its share of each update's --batch-tokens, rank 0 writes the files.",
    )
    run = parser.add_argument_group("run")
    run.add_argument("--data", metavar="DATA_DIR",
                     help="data directory of `nmt prepare` (default when resuming: the run's)")
    run.add_argument("--out", metavar="RUN_DIR",
                     help="run directory: created, or continued if it holds this same run")
    run.add_argument("--resume", metavar="RUN_DIR",
                     help="continue the run in RUN_DIR with its recorded settings; --set and "
                     "the flags below may change when to stop, validate, save and log, and "
                     "--max-tokens/--update-freq how each process makes up its share of "
                     "--batch-tokens")
    run.add_argument("--init-from", metavar="MODEL.pt",
                     help="fine-tune: start from this model file's or checkpoint's weights with "
                     "a fresh optimizer, step counter and schedule; its architecture and regime "
                     "are the defaults, except a short warm-up (500 steps) to a modest peak rate "
                     "(--lr-peak 1e-4), then the inverse square root decay: fresh Adam moments "
                     "need a few hundred steps to settle, and a rate of about a seventh of "
                     "pre-training's adapts the model without erasing what it learned (as "
                     "fairseq's inverse_sqrt fine-tuning recipes do). The data must be encoded "
                     "with the model's vocabulary (nmt prepare --vocab MODEL.pt); another "
                     "vocabulary or architecture is refused. Rerunning resumes from the run's "
                     "own checkpoints")
    run.add_argument("--preset", metavar="NAME",
                     help="architecture and regime from `nmt presets` (default: base, or the "
                     "run's own when continuing)")
    run.add_argument("--config", metavar="FILE.json",
                     help="JSON with 'preset', 'model' and/or 'train' objects, e.g. another "
                     "run's config.json")
    run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="set any model or training field; repeatable")
    _add_process_arguments(run)
    _add_train_config_arguments(parser)
    parser.set_defaults(func=run_train)


def _add_process_arguments(run: argparse._ArgumentGroup) -> None:
    """Where each process trains, and how long it waits for the others."""
    run.add_argument("--device", metavar="DEVICE",
                     help="cpu, cuda or cuda:N (default: cuda when present, else cpu)")
    run.add_argument("--collective-timeout", type=float, metavar="SECONDS",
                     help="under torchrun: how long a process waits for the others (a "
                     "step's gradients, rank 0's checkpoint or validation) before it stops "
                     "(default: PyTorch's, 30 minutes on CPUs, 10 on GPUs); keep it above "
                     "the longest validation. When a process stops (killed, out of memory), "
                     "the others end with one line naming its rank, at once where its "
                     "connections close, else after this timeout; the checkpoints written "
                     "stay whole, and the same command resumes from the last")


def _add_train_config_arguments(parser: argparse.ArgumentParser) -> None:
    """A flag for every TrainConfig field but init_from (the run group's --init-from),
    grouped by whether a resumed run may change it; given, a flag overrides the preset."""
    regime = parser.add_argument_group("regime (defaults: the preset's; the base preset's "
                                       "shown)")
    groups = {None: regime, "batch split": regime, "free": parser.add_argument_group(
        "when to stop, validate, save and log, and how to compute (may change on resume)")}
    add_fields(parser, TrainConfig, exclude=("init_from",), groups=groups, group_by="resume",
               unset=True, note="base")


def run_train(args: argparse.Namespace) -> None:
    from transformer_nmt.training.run import parse_assignment
    from transformer_nmt.training.session import train

    if args.collective_timeout is not None and not args.collective_timeout > 0:
        raise UserError(f"--collective-timeout must be a number of seconds above 0, not "
                        f"{args.collective_timeout}")
    overrides = [parse_assignment(text) for text in args.set]
    overrides += field_values(args, TrainConfig, exclude=("init_from",),
                              given_only=True).items()
    summary = train(out=args.out, resume=args.resume, data=args.data, preset=args.preset,
                    config_file=args.config, overrides=overrides, init_from=args.init_from,
                    device=args.device, collective_timeout=args.collective_timeout,
                    command=rerunnable_command(args, "train"))
    for line in summary.lines:
        print(line)

def add_average_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "average",
        help="average the weights of a run's last or best checkpoints into one model file",
        description="Average the parameters of the newest N numbered checkpoints of a run "
        "directory (the paper: the last 5 for base models, the last 20 for big ones, "
        "written at 10-minute intervals), or of the checkpoint files given; or, with "
        "--best K, of the K with the best recorded validation. All must share "
        "one architecture and vocabulary. The output is a model file without optimizer "
        "state, for `nmt translate` and `nmt evaluate`.",
    )
    parser.add_argument("inputs", nargs="+", metavar="RUN_DIR_OR_CHECKPOINT",
                        help="one run directory, or checkpoint files")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--last", type=int, metavar="N",
                        help="average the newest N numbered checkpoints (this or --best is "
                        "required for a run directory; with files, their last N)")
    choice.add_argument("--best", type=int, metavar="K",
                        help="average the K checkpoints with the best validation by the "
                        "run's --valid-metric, which each checkpoint written at a validated "
                        "step records (train with --save-every equal to --valid-every so "
                        "that every validation keeps one)")
    parser.add_argument("--out", required=True, metavar="MODEL.pt", help="model file to write")
    parser.set_defaults(func=run_average)


# SIGTERM, as Ctrl-C, removes the model file being written (files.AtomicFile); neither
# cuts the import of torch short (interrupts.stop_signals_held).
@sigterm_unwinds()
def run_average(args: argparse.Namespace) -> None:
    with stop_signals_held():
        from transformer_nmt.model_file import save_model_file
        from transformer_nmt.training.checkpoint import (
            average_checkpoints, check_average_output, checkpoints_to_average)

    for name in ("last", "best"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name} must be at least 1, not {value}")
    paths = checkpoints_to_average(args.inputs, args.last, args.best)
    check_average_output(args.out, paths)
    save_model_file(average_checkpoints(paths), args.out)
    print(f"averaged {len(paths)} checkpoint(s) ({', '.join(path.name for path in paths)}) "
          f"into {args.out}")


def add_plot_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a run's training curves (loss, validation perplexity, rate) as a PNG",
        description="Read RUN_DIR/metrics.jsonl and draw training loss and NLL, validation "
        "NLL, perplexity, BLEU and chrF, learning rate and target tokens/s.",
    )
    parser.add_argument("run", metavar="RUN_DIR", help="run directory (or its metrics.jsonl)")
    parser.add_argument("--out", metavar="FILE.png",
                        help="image to write (default: RUN_DIR/curves.png)")
    parser.add_argument("--x", choices=["step", "wall", "tokens"], default="step",
                        help="horizontal axis: optimizer steps (default), training hours, "
                        "or target tokens seen")
    parser.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> None:
    from pathlib import Path

    from transformer_nmt.training.metrics import plot_metrics

    run = Path(args.run)
    out = args.out or (run if run.is_dir() else run.parent) / "curves.png"
    print(f"wrote {plot_metrics(run, out, args.x)}")
