# coding=utf-8
"""The in-process counterpart of cli.assert_one_line_error: a call that must stop with a
one-line UsageError."""

import pytest

from bert_mgpu.errors import UsageError


def assert_usage_error(func, *fragments):
  """Calls func, expects a one-line UsageError containing every fragment.

  Returns:
    The error message.
  """
  with pytest.raises(UsageError) as info:
    func()
  message = str(info.value)
  assert "\n" not in message, message
  for fragment in fragments:
    assert fragment in message, "%r not in %r" % (fragment, message)
  return message
