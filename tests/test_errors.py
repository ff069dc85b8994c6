"""The user's errors (errors.py): one exception type, and OS errors worded as one line
that names the path(s) at fault."""

from __future__ import annotations

import errno
import os

import pytest

from transformer_nmt.errors import UserError, describe_os_error


def test_an_os_error_names_its_path_and_the_systems_reason():
    with pytest.raises(OSError) as caught:
        open("/nonexistent-dir-of-the-test/file.txt", encoding="utf-8")
    line = describe_os_error(caught.value)
    assert line == ("/nonexistent-dir-of-the-test/file.txt: No such file or directory; "
                    "check the path, its directories and their permissions")
    assert "\n" not in line


def test_an_os_error_of_two_paths_names_both():
    error = OSError(errno.EXDEV, os.strerror(errno.EXDEV), "a/b", None, "c/d")
    assert describe_os_error(error).startswith(f"a/b -> c/d: {os.strerror(errno.EXDEV)}; ")


def test_an_os_error_without_a_path_is_its_reason():
    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device")) == (
        "No space left on device")
    assert describe_os_error(OSError("plain message")) == "plain message"


def test_a_user_error_is_an_exception_that_carries_its_one_line():
    assert issubclass(UserError, Exception) and not issubclass(UserError, OSError)
    assert str(UserError("data/x.txt: line 3 is empty; remove it")) == (
        "data/x.txt: line 3 is empty; remove it")
