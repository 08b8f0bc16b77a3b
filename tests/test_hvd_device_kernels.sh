#!/usr/bin/env bash
# test_hvd_device_kernels: hvd's float16 cast kernels, which hvd/device_cast.c loads at
# run time from the PTX embedded in hvd/device_kernels_ptx.h (generated from
# hvd/device_kernels.cu by hvd/gen_device_kernels_ptx.sh). Checks, without a GPU:
#   - the header is current: the sha256 it records is that of device_kernels.cu;
#   - both kernels are there with the parameters device_cast.c passes (three 64-bit
#     values; three 64-bit values and a float), under the names it looks up;
#   - the PTX assembles with ptxas for sm_75, sm_80 and sm_90 (when ptxas is installed).
set -u
cd "$(dirname "$0")/.." || exit 1
hdr=hvd/device_kernels_ptx.h
src=hvd/device_kernels.cu
fail=0
bad() { echo "FAIL: $*"; fail=1; }

want=$(sed -n 's/^ *source sha256: \([0-9a-f]*\)$/\1/p' "$hdr")
have=$(sha256sum "$src" | cut -d' ' -f1)
[ -n "$want" ] || bad "$hdr records no source sha256"
[ "$want" = "$have" ] ||
  bad "$hdr is stale ($src changed): run hvd/gen_device_kernels_ptx.sh and commit both"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n 's/^    "\(.*\)\\n"$/\1/p' "$hdr" > "$tmp/k.ptx"
grep -q '^\.version ' "$tmp/k.ptx" || bad "no PTX found in $hdr"

params() { # kernel -> its parameter types, space separated
  awk -v k="$1" '$0 ~ "^.visible .entry " k "\\(" {on = 1; next}
                 on && /^\)/ {exit}
                 on && /\.param/ {printf "%s ", $2}' "$tmp/k.ptx"
}
[ "$(params hvd_cast_f32_to_f16)" = ".u64 .u64 .u64 " ] ||
  bad "hvd_cast_f32_to_f16 parameters are '$(params hvd_cast_f32_to_f16)', want 3 x .u64"
[ "$(params hvd_cast_f16_to_f32)" = ".u64 .u64 .u64 .f32 " ] ||
  bad "hvd_cast_f16_to_f32 parameters are '$(params hvd_cast_f16_to_f32)', want 3 x .u64, .f32"
for k in hvd_cast_f32_to_f16 hvd_cast_f16_to_f32; do
  grep -q "\"$k\"" hvd/device_cast.c || bad "hvd/device_cast.c does not look up $k"
done
grep -q 'cvt\.rn\.f16\.f32' "$tmp/k.ptx" || bad "the cast to float16 is not round-to-nearest-even"
grep -q 'div\.rn\.f32' "$tmp/k.ptx" || bad "the division of the cast back is not IEEE div.rn"

ptxas=$(command -v ptxas || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ptxas")
if [ -x "$ptxas" ]; then
  for arch in sm_75 sm_80 sm_90; do
    "$ptxas" -arch=$arch "$tmp/k.ptx" -o "$tmp/k_$arch.cubin" 2> "$tmp/ptxas.log" ||
      { cat "$tmp/ptxas.log"; bad "ptxas -arch=$arch rejects the embedded PTX"; }
  done
else
  echo "note: no ptxas, the PTX was not assembled"
fi
[ "$fail" -eq 0 ] || exit 1
echo "embedded float16 cast kernels: current, complete, and assemble"
