"""The C structs' layouts, read from moejit.h itself: the header is the one description of each
struct, and the ctypes classes (_capi.py) take their fields from it at import. Adding a field
touches the header and the code that uses it, not a Python mirror.

The header ships inside the package (a wheel: moejit/moejit.h); in a checkout it is read from
capi/moejit.h. Only what moejit.h's structs use is understood: integer and floating scalars,
the API's enums (C int), `const char *`, device pointers (any other pointer: void *) and the
log callback; anything else is an ImportError naming the field, never a guessed layout."""

from __future__ import annotations

import ctypes
import os
import re
from typing import Dict, List, Tuple

_SCALARS = {
    "int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "float": ctypes.c_float,
    "double": ctypes.c_double, "const char *": ctypes.c_char_p, "char *": ctypes.c_char_p,
}


def header_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = (os.path.join(here, "moejit.h"),  # installed next to the package's files
                  os.path.join(os.path.dirname(os.path.dirname(here)), "capi", "moejit.h"))
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise ImportError("moejit.h not found (the struct layouts are read from it); looked in "
                      + ", ".join(candidates))


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def struct_layouts(callbacks: Dict[str, object], text: str = None) -> Dict[str, List[Tuple[str, object]]]:
    """{C typedef name: ctypes _fields_} of every typedef'd struct in the header. `callbacks`
    maps function-pointer typedef names to their CFUNCTYPE."""
    if text is None:
        with open(header_path()) as f:
            text = f.read()
    code = _strip_comments(text)
    # MOEJIT_ENUM(name) { ... } name_t: a C enum (int-sized; the header asserts it).
    enums = set(re.findall(r"typedef\s+(?:enum\s+\w*|MOEJIT_ENUM\(\w+\))\s*\{[^}]*\}\s*(\w+)\s*;", code, flags=re.S))
    layouts = {}
    for m in re.finditer(r"typedef\s+struct\s+\w+\s*\{(.*?)\}\s*(moejit_\w+_t)\s*;", code, flags=re.S):
        body, name = m.group(1), m.group(2)
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            d = re.fullmatch(r"(.*?)\s*(\w+)", decl)
            ctype_text, field = d.group(1).replace(" *", " *").strip(), d.group(2)
            ctype_text = re.sub(r"\s*\*\s*$", " *", ctype_text)
            if ctype_text in _SCALARS:
                ctype = _SCALARS[ctype_text]
            elif ctype_text in enums:
                ctype = ctypes.c_int
            elif ctype_text in callbacks:
                ctype = callbacks[ctype_text]
            elif ctype_text.endswith("*"):
                ctype = ctypes.c_void_p  # device pointers
            else:
                raise ImportError(f"moejit.h: {name}.{field} has type '{ctype_text}', which the "
                                  "Python binding does not understand")
            fields.append((field, ctype))
        layouts[name] = fields
    return layouts
