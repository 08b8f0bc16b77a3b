# Sourced by the tests of the Python package (tests/test_python*.sh): runs from the
# repository root, finds the build's libhvd.so and sets what every run needs:
#   $py       the system Python (/usr/bin/python3: torch, torchvision, numpy)
#   $tmp      a temporary folder, removed at exit
#   run_np N SCRIPT ARGS...   SCRIPT on N ranks under mpirun with PYTHONPATH=python, a
#             timeout that only catches hangs; its output goes to stdout
set -u
cd "$(dirname "$0")/.." || exit 2
build=${HVD_BUILD:-build}
py=/usr/bin/python3
if [ -f "$build/config.flags" ] && [[ "$(cat "$build/config.flags")" != *"SAN_FLAGS= "* ]]; then
  # A sanitizer's runtime belongs to the program: its builds make no shared library.
  echo "SKIP: $build is a sanitizer build: the Python package loads the shared libhvd of a plain build"
  exit 77
fi
lib=$build/lib/libhvd.so.0
[ -f "$lib" ] || { echo "FAIL: $lib is missing (run make, or make shared)"; exit 1; }
command -v mpirun >/dev/null || { echo "FAIL: mpirun is not installed"; exit 1; }
"$py" -c 'import numpy, torch, torchvision' 2>/dev/null ||
  { echo "FAIL: $py lacks numpy, torch or torchvision (scripts/install-deps.sh installs them)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_orte_tmpdir_base=$tmp
# GLOO_SOCKET_IFNAME: PyTorch DDP (gloo) talks over loopback only.
export HVD_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/python OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
run_np() {
  local n=$1
  shift
  timeout -k 5 300 mpirun --oversubscribe --bind-to none -np "$n" -x HVD_LIBRARY -x PYTHONPATH \
    -x OMP_NUM_THREADS -x GLOO_SOCKET_IFNAME "$py" "$@"
}
