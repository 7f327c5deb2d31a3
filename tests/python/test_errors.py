"""Every moejit_status_t maps to its own exception class carrying the status and the message."""

import ctypes
import pickle

import pytest

import moejit
from moejit import _capi, errors

EXPECTED_CLASSES = {
    1: moejit.InvalidArgumentError,
    2: moejit.UnsupportedError,
    3: moejit.OutOfMemoryError,
    4: moejit.NoDriverError,
    5: moejit.NoDeviceError,
    6: moejit.CudaError,
    7: moejit.CompileError,
    8: moejit.JitDisabledError,
    9: moejit.CacheError,
    10: moejit.InternalError,
}


def _set_last_error(lib):
    """Makes a real call fail so moejit_last_error() holds a known, non-empty message."""
    status = lib.moejit_context_arch(None, ctypes.byref(ctypes.c_char_p()))
    assert status == _capi.ERROR_INVALID_ARGUMENT
    message = _capi.last_error()
    assert message
    return message


def test_status_names_match_the_library(lib):
    for status, name in errors.STATUS_NAMES.items():
        assert _capi.status_string(status) == name
    assert _capi.status_string(9999) == "unknown status"


@pytest.mark.parametrize("status", sorted(EXPECTED_CLASSES))
def test_status_maps_to_its_class_with_the_message(lib, status):
    message = _set_last_error(lib)
    with pytest.raises(EXPECTED_CLASSES[status]) as info:
        _capi.check(status)
    e = info.value
    assert type(e) is EXPECTED_CLASSES[status]
    assert isinstance(e, moejit.MoejitError)
    assert e.status == status
    assert e.status_name == _capi.status_string(status)
    assert e.message == message
    assert str(e) == f"{e.status_name}: {message}"


def test_classes_are_distinct_and_named_after_their_status():
    assert len(set(EXPECTED_CLASSES.values())) == len(EXPECTED_CLASSES)
    for status, cls in EXPECTED_CLASSES.items():
        assert cls.status == status
        words = errors.STATUS_NAMES[status][len("MOEJIT_ERROR_"):].split("_")
        assert cls.__name__ == "".join(w.capitalize() for w in words) + "Error"
        assert errors.error_class(status) is cls


def test_unknown_status_gives_the_base_class(lib):
    _set_last_error(lib)
    with pytest.raises(moejit.MoejitError) as info:
        _capi.check(77)
    assert type(info.value) is moejit.MoejitError
    assert info.value.status == 77
    assert "77" in info.value.status_name


def test_success_is_not_an_error(lib):
    _capi.check(_capi.SUCCESS)
    with pytest.raises(ValueError):
        errors.error_for_status(0, "")


def test_real_failure_raises_with_the_library_message(lib, compile_only_context):
    # A NULL handle is rejected by the library; the exception carries its message.
    with pytest.raises(moejit.InvalidArgumentError) as info:
        _capi.check(lib.moejit_context_arch(None, ctypes.byref(ctypes.c_char_p())))
    assert "context" in info.value.message
    assert info.value.message == _capi.last_error()


def test_python_base_classes_and_pickling():
    e = errors.error_for_status(1, "x is bad")
    assert isinstance(e, ValueError)
    assert isinstance(errors.error_for_status(2, "no"), NotImplementedError)
    assert isinstance(errors.error_for_status(3, "no"), MemoryError)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is moejit.InvalidArgumentError
    assert (back.status, back.status_name, back.message) == (1, "MOEJIT_ERROR_INVALID_ARGUMENT",
                                                             "x is bad")
