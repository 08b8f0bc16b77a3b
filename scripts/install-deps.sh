#!/usr/bin/env bash
# Installs the Debian packages that the build and the tests need, when they are missing.
# Idempotent: a machine that has them all is left alone (no apt-get at all).
# PyTorch (python3-torch, Debian's CPU build, and python3-numpy) is here because the
# interchange tests need it, on the interpreter they call, /usr/bin/python3 (a python3
# earlier on PATH, such as pyenv's, may lack it): test_train_export.sh runs docs/train.md's
# PyTorch example on train's export, test_train_init_weights.sh and
# test_train_torch_models.sh check python/hvd_models.py both ways. Without them those tests
# fail (they do not skip): after installing, this script checks that the import works.
set -euo pipefail

packages=(
  build-essential pkg-config
  libopenblas-dev          # cblas_sgemm
  openmpi-bin libopenmpi-dev
  libhwloc-dev hwloc        # topology
  zlib1g-dev                # gzip'd IDX data files
  dataset-fashion-mnist     # the real data set for `make run`
  iproute2 procps python3   # network namespaces (multi-host tests), timeline JSON check
  python3-torch python3-numpy  # the PyTorch interchange tests (see above)
  libmicrohttpd-dev libjansson-dev  # serve: HTTP server and JSON (TF Serving's REST API)
  slurm-wlm munge           # the SLURM tests' simulated cluster (scripts/slurm-cluster.sh)
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev  # image input: JPEG (TurboJPEG and libjpeg APIs) and PNG decoding
  libprotobuf-c-dev protobuf-c-compiler  # protobuf messages: TFRecord Examples, TF Serving's gRPC, ONNX
  libnghttp2-dev                    # serve: HTTP/2 under gRPC
  python3-torchvision python3-pil python3-skimage  # references: torchvision models and transforms, photographs
  python3-grpcio python3-grpc-tools python3-protobuf  # the gRPC client of the serve tests
  python3-onnx                      # ONNX models in the tests (torch.onnx.export, onnx.checker)
  nghttp2-client                    # h2load: the C client of scripts/serve_load.py protocols (REST and gRPC)
  python3-matplotlib                # the benchmarks' pictures (scripts/plot_*.py, scripts/figures.py; tests/test_plots.sh)
)

# The interchange tests' interpreter must import what they use: a package recorded as
# installed can still be broken (a half-configured install, files removed by hand).
check_torch() {
  /usr/bin/python3 -c 'import numpy, torch' 2>/dev/null && return 0
  echo "install-deps: /usr/bin/python3 cannot import numpy and torch although python3-numpy" \
    "and python3-torch are installed; repair them: apt-get install --reinstall python3-torch python3-numpy" >&2
  return 1
}

# onnxruntime (the ONNX tests' reference runtime) has no Debian package: pip, without
# its dependencies (numpy and protobuf are Debian's; pip's newer protobuf would shadow
# Debian's under /usr/local and break python3-onnx's and grpc's generated modules).
install_onnxruntime() {
  /usr/bin/python3 -c 'import onnxruntime' 2>/dev/null && return 0
  /usr/bin/python3 -m pip install --break-system-packages --no-deps onnxruntime flatbuffers
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  check_torch
  install_onnxruntime
  exit
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq </dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
check_torch
install_onnxruntime
