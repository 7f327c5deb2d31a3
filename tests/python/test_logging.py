"""The library's log callback reaches Python's logging (logger "moejit"): a cache warning
(an unwritable cache folder) is never lost; Context(log=False) is silent; a callable still
receives (level, message) itself."""

import logging

import pytest

import moejit
from moejit import _capi, _logging

SMALL = dict(dtype="bfloat16", hidden_size=128, intermediate_size=64, num_experts=4, top_k=2)


def test_levels_map_to_python_logging():
    assert _logging.python_level(_capi.LOG_DEBUG) == logging.DEBUG
    assert _logging.python_level(_capi.LOG_INFO) == logging.INFO
    assert _logging.python_level(_capi.LOG_WARNING) == logging.WARNING
    assert _logging.python_level(_capi.LOG_ERROR) == logging.ERROR
    assert _logging.python_level(99) == logging.WARNING


def test_bridge_forwards_to_the_moejit_logger(caplog):
    with caplog.at_level(logging.DEBUG, logger="moejit"):
        _logging.to_python_logging(_capi.LOG_WARNING, "cache folder unwritable\n")
        _logging.to_python_logging(_capi.LOG_DEBUG, "compile log")
    records = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("moejit", logging.WARNING, "cache folder unwritable") in records
    assert ("moejit", logging.DEBUG, "compile log") in records


def _unwritable(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    return str(blocker / "cache")


def test_a_cache_warning_reaches_python_logging_by_default(tmp_path, lib, caplog):
    with caplog.at_level(logging.WARNING, logger="moejit"):
        with moejit.Context(compile_only=True, arch="sm_90a",
                            cache_dir=_unwritable(tmp_path)) as ctx:
            moejit.warmup(ctx, **SMALL)
    warnings = [r for r in caplog.records if r.name == "moejit" and r.levelno >= logging.WARNING]
    assert warnings, "the library's cache warning did not reach logging.getLogger('moejit')"


def test_log_false_is_silent(tmp_path, lib, caplog):
    with caplog.at_level(logging.DEBUG, logger="moejit"):
        with moejit.Context(compile_only=True, arch="sm_90a", cache_dir=_unwritable(tmp_path),
                            log=False) as ctx:
            moejit.warmup(ctx, **SMALL)
    assert not [r for r in caplog.records if r.name == "moejit"]


def test_bad_log_argument(lib):
    with pytest.raises(moejit.InvalidArgumentError, match="log must be"):
        moejit.Context(compile_only=True, arch="sm_90a", log="stderr")
