"""hvd._build: what the loaded libhvd was built with, as Horovod's *_built/*_enabled
functions ask. hvd moves host memory over MPI (a real MPI, or the one-process stub of
`make MPI=stub`) and device memory over NCCL when built with CUDA; it has no Gloo, DDL,
oneCCL or ROCm."""
import ctypes
import os

from ._lib import lib, library_path

# Open MPI and MPICH both number MPI_THREAD_SINGLE..MULTIPLE 0..3.
_MPI_THREAD_MULTIPLE = 3


def mpi_built():
    """True when libhvd runs on a real MPI (the MPI=stub build's single-process stand-in
    lacks MPI_Get_library_version, which every MPI-3 library has)."""
    return hasattr(lib, "MPI_Get_library_version")


def mpi_enabled():
    return mpi_built()


def mpi_threads_supported():
    """Whether MPI runs with MPI_THREAD_MULTIPLE, so that other MPI calls (mpi4py) may run
    beside hvd's background thread. hvd asks for MPI_THREAD_SERIALIZED, so this is True
    only when the program initialized MPI with MULTIPLE itself before hvd.init()."""
    if not lib.hvd_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    if not mpi_built():
        raise ValueError("hvd was built without MPI (MPI=stub): no MPI is enabled")
    provided = ctypes.c_int(-1)
    if lib.MPI_Query_thread(ctypes.byref(provided)) != 0:
        raise ValueError("MPI_Query_thread failed")
    return provided.value == _MPI_THREAD_MULTIPLE


def cuda_built():
    """True when libhvd came with its CUDA backend (libhvd_cuda.so.0 beside it, as a CUDA
    build and make install put it). hvd.torch takes CPU tensors only even then."""
    here = os.path.dirname(os.path.realpath(library_path))
    return os.path.exists(os.path.join(here, "libhvd_cuda.so.0"))


def nccl_built():
    """hvd's CUDA backend always reduces device memory with NCCL."""
    return cuda_built()


def gloo_built():
    return False


def gloo_enabled():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False
