"""The one exception type for mistakes a user can fix.

The CLI prints a `UserError` as a single line (no traceback) and exits with status 2.
Its message names the file, line or value at fault and says what to do.
"""


class UserError(Exception):
    """A problem with the user's input or files, explained in one line."""
