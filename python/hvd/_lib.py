"""hvd._lib: finds and loads libhvd with ctypes, declares the C signatures of hvd/hvd.h
and turns a failed call's status into HorovodInternalError carrying hvd's message.

Where the library comes from, first found wins:
  1. $HVD_LIBRARY (a path to libhvd.so);
  2. libhvd.so.0 beside this package (make install links it there);
  3. build/lib/libhvd.so.0 of the source tree this package sits in (PYTHONPATH=python);
  4. libhvd.so.0 on the loader's search path (ldconfig, LD_LIBRARY_PATH).
ctypes rather than a C extension: the C API takes plain pointers and counts, so nothing
needs Python's headers, and one package works with every Python 3 and every build of hvd.
"""
import ctypes
import os

__all__ = ["HorovodInternalError", "lib", "check", "library_path", "Options"]


class HorovodInternalError(RuntimeError):
    """A collective or the runtime failed; the message is hvd's (hvd_last_error)."""


_HERE = os.path.dirname(os.path.abspath(__file__))
_CANDIDATES = [
    os.path.join(_HERE, "libhvd.so.0"),
    os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", "lib", "libhvd.so.0"),
]


def _find():
    env = os.environ.get("HVD_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise ImportError("HVD_LIBRARY=%s: no such file (point it at libhvd.so, e.g. "
                              "build/lib/libhvd.so after `make shared`)" % env)
        return env
    for path in _CANDIDATES:
        if os.path.exists(path):
            return path
    return "libhvd.so.0"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_path(name, function):
    """The file the loader took for name. A bare name is looked up on the loader's search
    path (ldconfig, LD_LIBRARY_PATH), which Python does not see: dladdr on one of the
    library's functions names the file (glibc has dladdr in libc from 2.34, in libdl
    before). name itself when the loader cannot say."""
    if os.sep in name:
        return name
    for where in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(where).dladdr
        except (OSError, AttributeError):
            continue
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        if dladdr(ctypes.cast(function, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    return name


library_path = _find()
try:
    # RTLD_GLOBAL: Open MPI loads its components with dlopen, and they look for libmpi's
    # symbols in the global scope.
    lib = ctypes.CDLL(library_path, mode=ctypes.RTLD_GLOBAL)
except OSError as e:
    raise ImportError("hvd: cannot load %s (%s); build it with `make shared` (build/lib), "
                      "install it with `make install`, or set HVD_LIBRARY to its path"
                      % (library_path, e)) from None
library_path = _loaded_path(library_path, lib.hvd_init)

_libc = ctypes.CDLL(None)
free = _libc.free
free.argtypes = [ctypes.c_void_p]
free.restype = None

# Status values of hvd_status_t (hvd/hvd.h).
OK = 0

# hvd_dtype_t and hvd_op_t, in the header's order.
FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64 = range(8)
SUM, AVERAGE, MIN, MAX, PRODUCT = range(5)



class Options(ctypes.Structure):
    """hvd_options_t: the process set of a call (0 = every rank). The factors stay 0 (= 1):
    hvd.torch scales in Python, which works for integer tensors too."""
    _fields_ = [("process_set", ctypes.c_int32), ("prescale_factor", ctypes.c_double),
                ("postscale_factor", ctypes.c_double)]


_vp, _sz, _int, _st = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int
_str = ctypes.c_char_p
_req_p = ctypes.POINTER(ctypes.c_void_p)
_opt_p = ctypes.POINTER(Options)
_SIGNATURES = {
    "hvd_init": ([], _st),
    "hvd_shutdown": ([], _st),
    "hvd_initialized": ([], _int),
    "hvd_rank": ([], _int), "hvd_size": ([], _int),
    "hvd_local_rank": ([], _int), "hvd_local_size": ([], _int),
    "hvd_cross_rank": ([], _int), "hvd_cross_size": ([], _int),
    "hvd_status_string": ([_st], _str),
    "hvd_last_error": ([], _str),
    "hvd_allreduce_async_ex": ([_str, _vp, _vp, _sz, _int, _int, _opt_p, _req_p], _st),
    "hvd_grouped_allreduce_async_ex": ([_sz, ctypes.POINTER(_str), ctypes.POINTER(_vp),
                                        ctypes.POINTER(_vp), ctypes.POINTER(_sz), _int, _int,
                                        _opt_p, _req_p], _st),
    "hvd_broadcast_async_ex": ([_str, _vp, _sz, _int, _int, _opt_p, _req_p], _st),
    "hvd_allgather_ex": ([_str, _vp, _sz, _int, ctypes.POINTER(_vp), ctypes.POINTER(_sz),
                          _opt_p], _st),
    "hvd_alltoall_async_ex": ([_str, _vp, _sz, ctypes.POINTER(_sz), _int, ctypes.POINTER(_vp),
                               ctypes.POINTER(_sz), ctypes.POINTER(_sz), _opt_p, _req_p], _st),
    "hvd_reducescatter_async_ex": ([_str, _vp, _sz, _int, _int, _vp, ctypes.POINTER(_sz),
                                    _opt_p, _req_p], _st),
    "hvd_barrier_ex": ([_opt_p], _st),
    "hvd_process_set_add": ([ctypes.POINTER(_int), _int, ctypes.POINTER(ctypes.c_int32)], _st),
    "hvd_process_set_remove": ([ctypes.c_int32], _st),
    "hvd_process_set_rank": ([ctypes.c_int32], _int),
    "hvd_process_set_size": ([ctypes.c_int32], _int),
    "hvd_join": ([ctypes.POINTER(_int)], _st),
    "hvd_wait": ([_vp], _st),
    "hvd_test": ([_vp, ctypes.POINTER(_int)], _st),
    "hvd_dtype_size": ([_int], _sz),
}
for _name, (_args, _res) in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = _res


def error_message(status):
    """"HVD_ERR_MISMATCH: <hvd's detailed message>" for a failed status."""
    name = lib.hvd_status_string(status).decode("utf-8", "replace")
    detail = lib.hvd_last_error().decode("utf-8", "replace")
    return "%s: %s" % (name, detail) if detail else name


def check(status, what):
    """Raises HorovodInternalError naming the call (what) and hvd's message."""
    if status != OK:
        raise HorovodInternalError("%s failed: %s" % (what, error_message(status)))


def encode_name(name):
    """A tensor name as the C API takes it (None: the runtime's automatic name)."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError("name must be a str or None, not %s" % type(name).__name__)
    return name.encode("utf-8")
