#!/usr/bin/env bash
# Installs the Debian packages that the build and the tests need, when they are missing.
# Idempotent: a machine that has them all is left alone (no apt-get at all).
# PyTorch (python3-torch, Debian's CPU build) is here because a test needs it:
# test_train_export.sh scores train's exported weights with PyTorch.
set -euo pipefail

packages=(
  build-essential pkg-config
  libopenblas-dev          # cblas_sgemm
  openmpi-bin libopenmpi-dev
  libhwloc-dev hwloc        # topology
  zlib1g-dev                # gzip'd IDX data files
  dataset-fashion-mnist     # the real data set for `make run`
  iproute2 procps python3   # network namespaces (multi-host tests), timeline JSON check
  python3-torch python3-numpy  # test_train_export.sh: PyTorch loads train's export
  libmicrohttpd-dev libjansson-dev  # serve: HTTP server and JSON (TF Serving's REST API)
  slurm-wlm munge           # the SLURM tests' simulated cluster (scripts/slurm-cluster.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq </dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
