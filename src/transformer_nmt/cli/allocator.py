"""`nmt train` and `nmt quickstart` on a CPU start again with tcmalloc as the process's
memory allocator, where it is installed (transformer_nmt.memory.training_allocator says
why and when).

The command line is read before the parser is built, so that starting again costs an
interpreter's start and no more."""

from __future__ import annotations

import os
import sys

TRAINING_COMMANDS = ("train", "quickstart")
GPU_DRIVERS = ("/proc/driver/nvidia", "/dev/kfd")
"""Present where a CUDA (NVIDIA) or ROCm (AMD) driver is loaded."""


def _command(arguments: list[str]) -> str | None:
    """The subcommand of the command line `arguments` (without the program)."""
    return next((argument for argument in arguments if not argument.startswith("-")), None)


def trains_on_cpu(arguments: list[str]) -> bool:
    """Whether the command line `arguments` (without the program) trains, and on a CPU:
    its --device, else where no GPU is present."""
    if _command(arguments) not in TRAINING_COMMANDS or "-h" in arguments or "--help" in arguments:
        return False
    device = "auto"
    for i, argument in enumerate(arguments):
        if argument == "--device" and i + 1 < len(arguments):
            device = arguments[i + 1]
        elif argument.startswith("--device="):
            device = argument.partition("=")[2]
    if device != "auto":
        return device.startswith("cpu")
    if not any(map(os.path.exists, GPU_DRIVERS)):
        return True  # no GPU driver, no GPU: decided without importing torch, which is slow
    import torch

    return not torch.cuda.is_available()


def start_again_with_tcmalloc() -> None:
    """Replace this process by the same command with tcmalloc preloaded, when sys.argv
    trains on a CPU and tcmalloc is installed; otherwise return and go on as it is."""
    from transformer_nmt.memory import ALLOCATOR_VARIABLE, training_allocator

    environment = training_allocator(os.environ)
    if environment is None or not trains_on_cpu(sys.argv[1:]):
        return
    print(f"nmt {_command(sys.argv[1:])}: memory allocator tcmalloc ({environment['LD_PRELOAD']}; "
          f"{ALLOCATOR_VARIABLE}=system keeps the C library's)", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "transformer_nmt.cli", *sys.argv[1:]],
              environment)
