"""The library's log callback, bridged to Python's logging: logger "moejit".

Every Context created without its own `log` callable sends the library's messages (cache
warnings such as an unwritable cache folder, compile logs) to logging.getLogger("moejit") at
the matching level: MOEJIT_LOG_DEBUG -> DEBUG, INFO -> INFO, WARNING -> WARNING, ERROR ->
ERROR. With no logging configured, Python's last-resort handler prints warnings and errors to
stderr, so a cache warning is never lost; debug and info stay silent until the application
enables them (logging.getLogger("moejit").setLevel(logging.DEBUG) and a handler). To silence
the library entirely, raise the logger's level or pass Context(log=False).
"""

from __future__ import annotations

import logging

from . import _capi

logger = logging.getLogger("moejit")

_LEVELS = {_capi.LOG_DEBUG: logging.DEBUG, _capi.LOG_INFO: logging.INFO,
           _capi.LOG_WARNING: logging.WARNING, _capi.LOG_ERROR: logging.ERROR}


def python_level(level: int) -> int:
    """The logging level of a moejit_log_level_t (an unknown level counts as WARNING)."""
    return _LEVELS.get(int(level), logging.WARNING)


def to_python_logging(level: int, message: str) -> None:
    """A Context `log` callable: forwards (level, message) to the "moejit" logger."""
    py_level = python_level(level)
    if logger.isEnabledFor(py_level):
        logger.log(py_level, "%s", message.rstrip("\n"))
