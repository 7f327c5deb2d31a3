"""The ctypes mirror of moejit.h: every function, enum value and struct field, with the
layouts checked against the library's *_init() functions and a C compiler."""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

import moejit
from moejit import _capi
from conftest import HEADER


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _header_structs(text):
    """{C typedef name: [field names in order]} for every typedef'd struct with a body."""
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+\w+\s*\{(.*?)\}\s*(moejit_\w+_t)\s*;",
                         _strip_comments(text), flags=re.S):
        body, name = m.group(1), m.group(2)
        fields = [re.search(r"(\w+)\s*$", decl.strip()).group(1)
                  for decl in body.split(";") if decl.strip()]
        structs[name] = fields
    return structs


def test_every_function_has_a_prototype(header_text):
    declared = set(re.findall(r"^MOEJIT_API\b[^;]*?\b(moejit_\w+)\s*\(", header_text,
                              flags=re.M | re.S))
    assert declared, "no functions found in the header"
    assert declared == set(_capi.PROTOTYPES), (
        f"missing in _capi: {sorted(declared - set(_capi.PROTOTYPES))}; "
        f"not in the header: {sorted(set(_capi.PROTOTYPES) - declared)}")


def test_every_enum_value_matches(header_text):
    values = re.findall(r"\b(MOEJIT_[A-Z0-9_]+)\s*=\s*(\d+)", _strip_comments(header_text))
    assert len(values) >= 20
    for name, value in values:
        attr = name[len("MOEJIT_"):]
        assert getattr(_capi, attr) == int(value), name


def test_every_struct_is_mirrored_field_by_field(header_text):
    structs = _header_structs(header_text)
    mirrored = {c_name: cls for cls, (c_name, _) in _capi.STRUCTS.items()}
    assert set(structs) == set(mirrored)
    for c_name, fields in structs.items():
        cls = mirrored[c_name]
        assert [f for f, _ in cls._fields_] == fields, c_name
        assert fields[0] == "struct_size"


@pytest.mark.parametrize("cls", list(_capi.STRUCTS), ids=lambda c: c.__name__)
def test_struct_size_matches_the_c_init(lib, cls):
    init_name = _capi.STRUCTS[cls][1]
    if not lib.has(init_name):
        pytest.fail(f"{lib.path} does not export {init_name}")
    # c_init_struct gives the library a larger zeroed buffer and checks what it wrote.
    value = _capi.c_init_struct(cls)
    assert value.struct_size == ctypes.sizeof(cls)
    assert cls().struct_size == ctypes.sizeof(cls)  # filled automatically
    assert cls(struct_size=3).struct_size == 3       # unless given
    copy = _capi.init_struct(cls)
    assert copy.struct_size == ctypes.sizeof(cls)


def _c_compiler():
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def test_struct_layouts_match_a_c_compiler(header_text, tmp_path):
    compiler = _c_compiler()
    if compiler is None:
        pytest.skip("no C compiler found")
    # moejit.h includes the generated moejit_version.h; its macros do not affect layouts.
    (tmp_path / "moejit_version.h").write_text(
        "#define MOEJIT_VERSION_MAJOR 0\n#define MOEJIT_VERSION_MINOR 0\n"
        "#define MOEJIT_VERSION_PATCH 0\n#define MOEJIT_VERSION_STRING \"0.0.0\"\n")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "moejit.h"',
             "int main(void) {"]
    for cls, (c_name, _) in _capi.STRUCTS.items():
        lines.append(f'    printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in cls._fields_:
            lines.append(f'    printf("{c_name}.{field} %zu %zu\\n", offsetof({c_name}, {field}), '
                         f'sizeof((({c_name} *)0)->{field}));')
    lines += ["    return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([compiler, "-std=c99", "-I", str(tmp_path), "-I", os.path.dirname(HEADER),
                    str(source), "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    c_layout = dict(line.split(" ", 1) for line in out.splitlines())
    for cls, (c_name, _) in _capi.STRUCTS.items():
        assert int(c_layout[c_name]) == ctypes.sizeof(cls), c_name
        for field, _ in cls._fields_:
            offset, size = (int(v) for v in c_layout[f"{c_name}.{field}"].split())
            descriptor = getattr(cls, field)
            assert (descriptor.offset, descriptor.size) == (offset, size), f"{c_name}.{field}"


def test_library_rejects_a_wrong_struct_size(compile_only_context):
    lib = _capi.lib()
    # "From a newer header": a larger input struct is accepted only while every byte the
    # library does not know is zero (docs/DESIGN.md §5.2).
    size = ctypes.sizeof(_capi.ContextOptions)
    buffer = (ctypes.c_char * (size + 8))()
    ctypes.memmove(buffer, ctypes.byref(_capi.init_struct(_capi.ContextOptions, compile_only=1,
                                                          arch=b"sm_90a")), size)
    ctypes.c_size_t.from_buffer(buffer).value = size + 8
    options = ctypes.cast(buffer, ctypes.POINTER(_capi.ContextOptions))
    handle = ctypes.c_void_p()
    _capi.check(lib.moejit_context_create(options, ctypes.byref(handle)))
    lib.moejit_context_destroy(handle)
    buffer[size + 3] = b"\x01"
    with pytest.raises(moejit.InvalidArgumentError, match="struct_size"):
        _capi.check(lib.moejit_context_create(options, ctypes.byref(handle)))
    lib = _capi.lib()
    stats = _capi.CacheStats(struct_size=8)
    with pytest.raises(moejit.InvalidArgumentError, match="struct_size"):
        _capi.check(lib.moejit_context_cache_stats(compile_only_context.handle,
                                                   ctypes.byref(stats)))


def test_options_defaults_from_the_library(lib):
    options = _capi.init_struct(_capi.ContextOptions)
    assert options.cache_dir is None and options.arch is None
    assert options.jit_mode == _capi.JIT_FROM_ENV and options.compile_only == 0


# The 0.5 growth (moejit.h, capi_struct.hpp's LP64 pins): the new fields' offsets and sizes,
# and the sizes of earlier releases, which the library keeps accepting.
GROWTH_0_5 = {
    # 0.11 appended recipe after naming 0.5's tail padding (96 stays a released size).
    _capi.PlanDesc: (104, {"tokens_hint": 72, "activation_alpha": 80, "weights_transposed": 84,
                           "has_bias": 88, "recipe": 96}, (80, 96)),
    # 0.11 appended the FP8 weight cache to both args (136 and 184 stay released sizes).
    _capi.ForwardArgs: (160, {"stream": 112, "b_gate_up": 120, "b_down": 128,
                              "weight_cache": 136, "weight_cache_mode": 152}, (120, 136)),
    _capi.BackwardArgs: (208, {"x": 152, "b_down": 160, "db_gate_up": 168, "db_down": 176,
                               "weight_cache": 184, "weight_cache_mode": 200},
                         (152, 160, 184)),
}


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the pins are LP64's")
@pytest.mark.parametrize("cls", list(GROWTH_0_5), ids=lambda c: c.__name__)
def test_0_5_fields_are_appended_at_the_pinned_offsets(cls):
    size, offsets, _ = GROWTH_0_5[cls]
    assert ctypes.sizeof(cls) == size
    for field, offset in offsets.items():
        assert getattr(cls, field).offset == offset, field
    # Appended: every 0.5 field lies past the 0.4 struct.
    old = GROWTH_0_5[cls][2][-1]
    names = [f for f, _ in cls._fields_]
    new = [f for f in names if getattr(cls, f).offset >= old]
    assert new == names[len(names) - len(new):]


def test_0_5_enum_values():
    assert (_capi.FC1_SPLIT, _capi.FC1_MERGED, _capi.FC1_INTERLEAVED) == (0, 1, 2)
    assert (_capi.ACTIVATION_SWIGLU, _capi.ACTIVATION_GPT_OSS) == (0, 1)


@pytest.mark.parametrize("cls", list(GROWTH_0_5), ids=lambda c: c.__name__)
def test_library_inits_the_0_5_fields_to_zero_and_accepts_older_sizes(lib, cls):
    value = _capi.c_init_struct(cls)
    size, offsets, older = GROWTH_0_5[cls]
    for field in offsets:
        if getattr(cls, field).offset >= older[-1]:
            assert getattr(value, field) in (0, None), field  # zero: the 0.4 behaviour
    init = getattr(lib, _capi.STRUCTS[cls][1] + "_sized")
    for old in older:
        buffer = (ctypes.c_char * size)(*([b"\xab"] * size))
        _capi.check(init(ctypes.cast(buffer, ctypes.POINTER(cls)), old))
        assert ctypes.c_size_t.from_buffer(buffer).value == old
        assert bytes(buffer[old:]) == b"\xab" * (size - old), "wrote past the older size"
    with pytest.raises(moejit.InvalidArgumentError, match="struct_size"):
        _capi.check(init(ctypes.cast((ctypes.c_char * size)(), ctypes.POINTER(cls)),
                         size - 4))  # no header's size (every sizeof is a multiple of 8)
