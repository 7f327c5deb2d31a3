"""Exceptions: one class per moejit_status_t value, all derived from MoejitError.

This module does not touch the library, so it can be imported (and tested) anywhere.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "MoejitError",
    "InvalidArgumentError",
    "UnsupportedError",
    "OutOfMemoryError",
    "NoDriverError",
    "NoDeviceError",
    "CudaError",
    "CompileError",
    "JitDisabledError",
    "CacheError",
    "InternalError",
    "LibraryNotFoundError",
    "STATUS_NAMES",
    "error_class",
    "error_for_status",
]

# moejit_status_t, mirrored from capi/moejit.h (ABI: explicit and append-only).
STATUS_NAMES: Dict[int, str] = {
    0: "MOEJIT_SUCCESS",
    1: "MOEJIT_ERROR_INVALID_ARGUMENT",
    2: "MOEJIT_ERROR_UNSUPPORTED",
    3: "MOEJIT_ERROR_OUT_OF_MEMORY",
    4: "MOEJIT_ERROR_NO_DRIVER",
    5: "MOEJIT_ERROR_NO_DEVICE",
    6: "MOEJIT_ERROR_CUDA",
    7: "MOEJIT_ERROR_COMPILE",
    8: "MOEJIT_ERROR_JIT_DISABLED",
    9: "MOEJIT_ERROR_CACHE",
    10: "MOEJIT_ERROR_INTERNAL",
}


class MoejitError(Exception):
    """A failed moejit call.

    status: the moejit_status_t value (None for errors that have no status, e.g. a library
    that cannot be found); status_name: its C name; message: moejit_last_error() text (or the
    Python-side message for errors detected before calling the library).
    """

    status: Optional[int] = None

    def __init__(self, message: str, status: Optional[int] = None,
                 status_name: Optional[str] = None) -> None:
        if status is None:
            status = type(self).status
        if status_name is None:
            status_name = STATUS_NAMES.get(status, "unknown status") if status is not None \
                else type(self).__name__
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"{status_name}: {message}" if message else status_name)

    def __reduce__(self):  # keep the attributes through pickling (multiprocessing, ...)
        return (type(self), (self.message, self.status, self.status_name))


def _status_error(name: str, status: int, doc: str, *bases: type) -> Type[MoejitError]:
    """The exception class of one moejit_status_t value (bases: the builtin it also is)."""
    return type(name, (MoejitError, *bases), {"__doc__": doc, "status": status,
                                              "__module__": __name__})


InvalidArgumentError = _status_error(
    "InvalidArgumentError", 1, "A bad value; the message names the argument.", ValueError)
UnsupportedError = _status_error(
    "UnsupportedError", 2, "Valid but not implemented (shape, dtype, arch).", NotImplementedError)
OutOfMemoryError = _status_error("OutOfMemoryError", 3, "Host allocation failed.", MemoryError)
NoDriverError = _status_error("NoDriverError", 4, "libcuda.so.1 could not be loaded.")
NoDeviceError = _status_error("NoDeviceError", 5, "Driver present, no (such) CUDA device.")
CudaError = _status_error("CudaError", 6, "A CUDA driver call failed; the message names it.")
CompileError = _status_error("CompileError", 7, "NVRTC failed; the message holds its log.")
JitDisabledError = _status_error(
    "JitDisabledError", 8, "A kernel cache miss with compilation switched off (MOEJIT_COMPILE=off).")
CacheError = _status_error("CacheError", 9, "Reserved: cache problems degrade, they do not fail.")
InternalError = _status_error("InternalError", 10, "A bug in moejit; please report it.")


class LibraryNotFoundError(MoejitError):
    """libmoejit.so could not be loaded; the message lists every path tried."""

    def __init__(self, message: str, status: Optional[int] = None,
                 status_name: Optional[str] = None) -> None:
        MoejitError.__init__(self, message, status, status_name or "LibraryNotFoundError")


_CLASSES: Dict[int, Type[MoejitError]] = {
    cls.status: cls for cls in (InvalidArgumentError, UnsupportedError, OutOfMemoryError,
                                NoDriverError, NoDeviceError, CudaError, CompileError,
                                JitDisabledError, CacheError, InternalError)
}


def error_class(status: int) -> Type[MoejitError]:
    """The exception class of a status (MoejitError for values this version does not know)."""
    return _CLASSES.get(int(status), MoejitError)


def error_for_status(status: int, message: str, status_name: Optional[str] = None) -> MoejitError:
    """Builds the exception for a non-zero status."""
    status = int(status)
    if status == 0:
        raise ValueError("MOEJIT_SUCCESS is not an error")
    if status_name is None or status_name == "unknown status":
        status_name = STATUS_NAMES.get(status, f"MOEJIT_STATUS_{status}")
    return error_class(status)(message, status, status_name)
