"""Peak resident memory of this process, for the benchmarks' child processes.

`resource.getrusage(RUSAGE_SELF).ru_maxrss` is wrong for them: Linux carries the parent's
peak across fork and exec into the child's figure, so a child started by a parent that
had built a model reports at least the parent's peak. /proc/self/status's VmHWM belongs
to the process's own address space, which exec replaces.
"""

from __future__ import annotations

import resource


def peak_rss_mb() -> int:
    """This process's own peak resident set size in MB (VmHWM; ru_maxrss off Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
