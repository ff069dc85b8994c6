"""The one exception type for mistakes a user can fix, and how the CLI words OS errors.

The CLI prints a `UserError` as a single line (no traceback) and exits with status 2.
Its message names the file, line or value at fault and says what to do. A file that
cannot be read or written (a missing directory, a path through a plain file, no
permission, a full disk) is printed the same way by `describe_os_error`, exit status 1.
"""


class UserError(Exception):
    """A problem with the user's input or files, explained in one line."""


def describe_os_error(error: OSError) -> str:
    """One line naming the path(s) at fault and the operating system's reason."""
    reason = error.strerror or str(error)
    if error.filename is None:
        return reason
    paths = str(error.filename)
    if error.filename2 is not None:
        paths += f" -> {error.filename2}"
    return f"{paths}: {reason}; check the path, its directories and their permissions"
