"""The other probes' raw samples (``RawFrame.aux``) to JSON and back, safely.

Probes report frozen dataclasses (backends, bans, profiles ...).  A recording
must store them without pickle: a recording is a file someone hands you, and
unpickling runs code.  So this codec writes plain JSON with type tags and,
when reading, rebuilds only dataclasses defined in ``fipstop`` modules (looked
up by module and class name, the module imported only if its name starts with
``fipstop.``), numpy arrays of plain (non-object) dtypes, tuples, bytes and
the JSON scalars.  Anything else is refused with a one-line ``ValueError``.

A dataclass whose fields changed since the recording was made is rebuilt from
the fields both know, with defaults for the new ones when it has them; a
missing required field is a clear error naming the class and the field.  A
class that moved to another module is found under its old name through
:data:`MOVED`, so recordings made before the move still replay; and it is
written under that old name too, so a recording made now still replays in a
fipstop from before the move (the name in the file is a wire name, which
moving code does not change).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import importlib
import json
import math
from typing import Any

import numpy as np

__all__ = ["from_jsonable", "to_jsonable", "dumps", "loads"]

_MAX_DEPTH = 64

#: (module, qualname) a recording may name -> where that class lives now
MOVED: dict[tuple[str, str], tuple[str, str]] = {
    ("fipstop.backends", "BackendsSample"): ("fipstop.probes.backends", "BackendsSample"),
    ("fipstop.sources", "ProbeFailure"): ("fipstop.model.raw", "ProbeFailure"),
}
#: where a class lives now -> the name a recording gives it
_WIRE_NAME = {now: before for before, now in MOVED.items()}


def to_jsonable(obj: Any, _depth: int = 0) -> Any:
    if _depth > _MAX_DEPTH:
        raise ValueError("aux sample nested too deeply")
    d = _depth + 1
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value, d)
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {"__f": repr(obj)}  # nan, inf, -inf
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"__b": base64.b64encode(bytes(obj)).decode()}
    if isinstance(obj, tuple):
        return {"__t": [to_jsonable(x, d) for x in obj]}
    if isinstance(obj, list):
        return [to_jsonable(x, d) for x in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {"__d": {k: to_jsonable(v, d) for k, v in obj.items()}}
        return {"__kv": [[to_jsonable(k, d), to_jsonable(v, d)] for k, v in obj.items()]}
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise ValueError("aux sample holds a numpy object array")
        a = np.ascontiguousarray(obj)
        return {"__np": {"dtype": _dtype_spec(a.dtype), "shape": list(a.shape),
                         "data": base64.b64encode(a.tobytes()).decode()}}
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item(), d)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        if not cls.__module__.startswith("fipstop."):
            raise ValueError(f"aux sample type {cls.__qualname__} is not a fipstop type")
        fields = {f.name: to_jsonable(getattr(obj, f.name), d) for f in dataclasses.fields(obj)}
        module, qualname = _WIRE_NAME.get((cls.__module__, cls.__qualname__), (cls.__module__, cls.__qualname__))
        return {"__dc": [module, qualname, fields]}
    raise ValueError(f"aux sample holds a {type(obj).__name__}, which a recording cannot store")


def _dtype_spec(dt: np.dtype) -> Any:
    if dt.names is None or dt.fields is None:
        return dt.str
    fields = dt.fields
    return {"names": list(dt.names), "formats": [_dtype_spec(fields[n][0]) for n in dt.names],
            "offsets": [fields[n][1] for n in dt.names], "itemsize": dt.itemsize}


def _dtype_from(spec: Any) -> np.dtype:
    if isinstance(spec, str):
        dt = np.dtype(spec)
    elif isinstance(spec, dict):
        dt = np.dtype({"names": [str(n) for n in spec["names"]],
                       "formats": [_dtype_from(f) for f in spec["formats"]],
                       "offsets": [int(o) for o in spec["offsets"]], "itemsize": int(spec["itemsize"])})
    else:
        raise ValueError("bad dtype")
    if dt.hasobject:
        raise ValueError("object dtype")
    return dt


def _class(module: str, qualname: str) -> type:
    if not isinstance(module, str) or not module.startswith("fipstop.") or not isinstance(qualname, str):
        raise ValueError(f"refusing type {str(module)[:60]}.{str(qualname)[:60]}: not a fipstop type")
    module, qualname = MOVED.get((module, qualname), (module, qualname))
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = vars(obj)[part]  # only what the module or class defines itself
    except (ImportError, KeyError, TypeError):
        raise ValueError(f"type {module}.{qualname} does not exist in this fipstop") from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise ValueError(f"refusing type {module}.{qualname}: not a dataclass")
    return obj


def from_jsonable(obj: Any, _depth: int = 0) -> Any:
    if _depth > _MAX_DEPTH:
        raise ValueError("aux sample nested too deeply")
    d = _depth + 1
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [from_jsonable(x, d) for x in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError("aux sample: unknown encoding")
    (tag, val), = obj.items()
    if tag == "__t":
        return tuple(from_jsonable(x, d) for x in val)
    if tag == "__d":
        return {str(k): from_jsonable(v, d) for k, v in val.items()}
    if tag == "__kv":
        return {from_jsonable(k, d): from_jsonable(v, d) for k, v in val}
    if tag == "__f":
        if val not in ("nan", "inf", "-inf"):
            raise ValueError("aux sample: bad float")
        return float(val)
    if tag == "__b":
        return base64.b64decode(val, validate=True)
    if tag == "__np":
        dt = _dtype_from(val["dtype"])
        shape = tuple(int(x) for x in val["shape"])
        data = base64.b64decode(val["data"], validate=True)
        n = math.prod(shape) if shape else 1
        if n * dt.itemsize != len(data):
            raise ValueError("aux sample: array data does not match its shape")
        a = np.frombuffer(data, dtype=dt).reshape(shape)
        a.flags.writeable = False
        return a
    if tag == "__dc":
        module, qualname, fields = val
        cls = _class(module, qualname)
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {k: from_jsonable(v, d) for k, v in fields.items() if k in known}
        for name, f in known.items():
            if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"recorded {qualname} lacks field {name!r} that this fipstop needs")
        return cls(**{k: v for k, v in kwargs.items() if known[k].init})
    raise ValueError(f"aux sample: unknown tag {str(tag)[:20]}")


def dumps(obj: Any) -> bytes:
    return json.dumps(to_jsonable(obj), separators=(",", ":"), allow_nan=False).encode()


def loads(b: bytes) -> Any:
    try:
        return from_jsonable(json.loads(b))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"recording: an aux sample cannot be read ({' '.join(str(e).split())[:160]})") from None
