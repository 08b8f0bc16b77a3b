#!/usr/bin/env bash
# make install into a temporary prefix, then only what it installed, used as a user
# outside the project would:
#  1. the layout: programs, libhvd and libnn shared (libX.so.0.1, soname libX.so.0, the
#     symlinks libX.so.0 and libX.so) and static, the headers as <hvd/hvd.h> and
#     <nn/nn.h>, hvd.pc and nn.pc whose prefix is the install prefix;
#  2. the README's C example, taken from README.md, built with `pkg-config --cflags
#     --libs hvd` (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig, nothing from the source tree),
#     run with mpirun on 2 ranks and alone: it prints the README's result;
#  3. a CPU program of nn and hvd: neither its NEEDED entries (readelf -d) nor the whole
#     tree of libraries it loads (ldd), nor what it loads while it runs (LD_DEBUG=files),
#     has a CUDA library (cudart, cuDNN, cuBLAS, NCCL, the driver);
#  4. DESTDIR stages the files under DESTDIR and leaves the prefix in the .pc files; their
#     Libs carry an rpath to PREFIX/lib, except for PREFIX=/usr;
#  5. the README's install recipe (its "## Install" block), run line by line as written
#     with HOME a temporary folder: make install PREFIX=$HOME/.local, then cc with
#     pkg-config; the program it builds starts alone and under mpirun with nothing else
#     (no LD_LIBRARY_PATH, no -rpath of the test's own).
#  7. the Python package hvd is installed for /usr/bin/python3 (imported from PREFIX's
#     site, and from $HOME/.local's user site without PYTHONPATH); make uninstall removes it.
# In a CUDA build also: the backends libnn_cuda.so.0 and libhvd_cuda.so.0 are installed
# beside the libraries, export their entry point alone and are loaded only on use: a
# device query loads libnn_cuda (it says "no device" on a machine without a GPU), a
# missing backend gives a message naming it, and once the CUDA driver is in the process
# (the toolkit's stub libcuda stands in) hvd loads libhvd_cuda, also when the driver
# arrives after hvd_init, and the collectives still give the right sums on host memory.
# The build directory is $HVD_BUILD (default build), installed with the configuration it
# was built with (its config.cuda and config.flags), so nothing is rebuilt.
set -u
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
build=${HVD_BUILD:-build}
for tool in pkg-config mpirun readelf ldd cc make; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed"; exit 1; }
done
[ -f "$build/config.cuda" ] && [ -f "$build/config.flags" ] ||
  { echo "FAIL: $build is not a build directory (run make first)"; exit 1; }
flags=$(cat "$build/config.flags")
if [[ "$flags" != *"SAN_FLAGS= "* ]]; then
  # A sanitizer's runtime belongs to the program, so its builds make no shared library.
  echo "SKIP: $build is a sanitizer build (${flags}): make install is for a plain build, where this test runs"
  exit 77
fi
cuda=0
grep -qx 'USE_CUDA=1' "$build/config.cuda" && cuda=1
# The build's own configuration, so that make finds everything up to date.
conf=(CUDA="$cuda")
for k in CC MPI BLAS ZLIB; do
  v=$(sed -nE "s/.*(^| )$k=([^ ]*).*/\2/p" <<<"$flags")
  [ -n "$v" ] && conf+=("$k=$v")
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
prefix=$tmp/prefix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset CPATH C_INCLUDE_PATH LIBRARY_PATH PKG_CONFIG_PATH LD_LIBRARY_PATH
cuda_libs='libcuda\.|libcudart|libcudnn|libcublas|libnccl'

echo "== make install BUILD=$build PREFIX=$prefix ${conf[*]}"
if ! make -j2 BUILD="$build" "${conf[@]}" PREFIX="$prefix" install > "$tmp/install.log" 2>&1; then
  tail -n 30 "$tmp/install.log"
  echo "FAIL: make install failed"
  exit 1
fi

# ---- 1. the layout ----
for f in bin/train bin/hvdrun bin/cnn_bench bin/allreduce_bench bin/serve; do
  [ -x "$prefix/$f" ] || fail "$f is not installed (or not executable)"
done
libs=(hvd nn)
[ $cuda -eq 1 ] && libs+=(hvd_cuda nn_cuda)
for n in "${libs[@]}"; do
  real=$prefix/lib/lib$n.so.0.1
  [ -f "$real" ] || { fail "lib/lib$n.so.0.1 is not installed"; continue; }
  soname=$(readelf -d "$real" | sed -nE 's/.*Library soname: \[(.*)\]/\1/p')
  [ "$soname" = "lib$n.so.0" ] || fail "lib$n.so.0.1 has soname '$soname', expected lib$n.so.0"
  [ "$(readlink "$prefix/lib/lib$n.so.0")" = "lib$n.so.0.1" ] || fail "lib/lib$n.so.0 is not a symlink to lib$n.so.0.1"
done
for n in hvd nn; do
  [ "$(readlink "$prefix/lib/lib$n.so")" = "lib$n.so.0" ] || fail "lib/lib$n.so is not a symlink to lib$n.so.0"
  [ -f "$prefix/lib/lib$n.a" ] || fail "lib/lib$n.a is not installed"
  pc=$prefix/lib/pkgconfig/$n.pc
  [ -f "$pc" ] || { fail "lib/pkgconfig/$n.pc is not installed"; continue; }
  grep -qx "prefix=$prefix" "$pc" || fail "$n.pc does not say prefix=$prefix: $(head -n 1 "$pc")"
  grep -q "$root" "$pc" && fail "$n.pc points into the source tree: $(grep "$root" "$pc")"
done
for h in hvd/hvd.h nn/nn.h nn/nn_cuda.h; do
  cmp -s "$h" "$prefix/include/$h" || fail "include/$h is not installed (or differs from $h)"
done
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion hvd 2>&1)" = "0.1" ] || fail "pkg-config --modversion hvd: $(pkg-config --modversion hvd 2>&1)"
libdir=$(pkg-config --variable=libdir hvd)
[ "$libdir" = "$prefix/lib" ] || fail "pkg-config --variable=libdir hvd: '$libdir', expected $prefix/lib"
[ $failures -eq 0 ] && echo "ok: layout, sonames, symlinks, headers and pkg-config files under $prefix"

# ---- 2. the README's C example, against the installed files only ----
mkdir -p "$tmp/user"
awk '/^## Using hvd from C/ { s = 1 } s && /^```c$/ { c = 1; next } c && /^```$/ { exit } c' \
  README.md > "$tmp/user/my_train.c"
grep -q 'hvd_init' "$tmp/user/my_train.c" || fail "no C example found in README.md"
# Built in a directory of its own: nothing of the source tree can be found by accident.
(
  cd "$tmp/user" || exit 1
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror my_train.c $(pkg-config --cflags --libs hvd) -o my_train
) > "$tmp/user/cc.log" 2>&1 || { cat "$tmp/user/cc.log"; fail "the README example does not build with pkg-config --cflags --libs hvd"; }
if [ -x "$tmp/user/my_train" ]; then
  echo "cc my_train.c $(pkg-config --cflags --libs hvd)"
  out=$(cd "$tmp/user" && timeout -k 5 60 mpirun --oversubscribe --bind-to none -np 2 ./my_train 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] && grep -qx 'w\[0\] = -0.5 on 2 ranks' <<<"$out" ||
    fail "the README example on 2 ranks: exit $rc, expected 'w[0] = -0.5 on 2 ranks'"
  out=$(cd "$tmp/user" && timeout -k 5 30 ./my_train 2>&1); rc=$?
  [ $rc -eq 0 ] && grep -qx 'w\[0\] = 0 on 1 ranks' <<<"$out" ||
    fail "the README example alone: exit $rc, expected 'w[0] = 0 on 1 ranks': $out"
  readelf -d "$tmp/user/my_train" | grep -q 'NEEDED.*\[libhvd\.so\.0\]' ||
    fail "the example is not linked to the shared libhvd.so.0: $(readelf -d "$tmp/user/my_train" | grep NEEDED)"
fi

# ---- 3. a CPU program of nn and hvd needs no CUDA library ----
cat > "$tmp/user/cpu_step.c" <<'EOF'
/* One training step of lenet on the CPU, gradients averaged with hvd; with an argument,
   asks nn for the GPU first (nn_cuda_info, nn_model_to_device) and says what it got. */
#include <hvd/hvd.h>
#include <nn/nn.h>
#include <nn/nn_cuda.h>
#include <stdio.h>

int main(int argc, char **argv) {
  (void)argv;
  if (hvd_init() != HVD_OK) { fprintf(stderr, "hvd_init: %s\n", hvd_last_error()); return 1; }
  nn_model_t *m;
  nn_model_config_t cfg = {.batch = 2, .seed = 7};
  if (nn_model_create(&m, "lenet", &cfg) != NN_OK) { fprintf(stderr, "%s\n", nn_last_error()); return 1; }
  if (argc > 1) {
    printf("device: %s\n", nn_cuda_info());
    nn_status_t s = nn_model_to_device(m, NN_DEVICE_CUDA);
    printf("to_device: %s\n", s == NN_OK ? "ok" : nn_last_error());
  }
  static float x[2 * 28 * 28];
  int32_t y[2] = {3, 5};
  for (int i = 0; i < 2 * 28 * 28; i++) x[i] = (float)((i * 7) % 11) / 11.0f;
  float loss;
  int correct;
  if (nn_model_forward(m, x, 2, 1) != NN_OK || nn_model_loss(m, y, &loss, &correct) != NN_OK ||
      nn_model_backward(m, NULL, NULL) != NN_OK) {
    fprintf(stderr, "%s\n", nn_last_error());
    return 1;
  }
  float *g = nn_model_grads(m);
  if (hvd_allreduce("grads", g, g, nn_model_param_len(m), HVD_FLOAT32, HVD_AVERAGE) != HVD_OK) {
    fprintf(stderr, "allreduce: %s\n", hvd_last_error());
    return 1;
  }
  if (hvd_rank() == 0) printf("rank 0 of %d: loss %.4f\n", hvd_size(), loss);
  nn_model_free(m);
  return hvd_shutdown() == HVD_OK ? 0 : 1;
}
EOF
if (cd "$tmp/user" && cc -std=c11 -Wall -Wextra -Werror cpu_step.c $(pkg-config --cflags --libs hvd nn) \
      -Wl,-rpath,"$libdir" -o cpu_step) > "$tmp/user/cc2.log" 2>&1; then
  needed=$(readelf -d "$tmp/user/cpu_step" | grep NEEDED)
  echo "readelf -d cpu_step:"; echo "$needed"
  grep -Eq "$cuda_libs" <<<"$needed" && fail "a CPU program's NEEDED entries name a CUDA library: $needed"
  tree=$(ldd "$tmp/user/cpu_step")
  grep -E "$cuda_libs" <<<"$tree" && fail "ldd: a CPU program loads a CUDA library at start"
  grep -q "libhvd.so.0 => $prefix/lib/libhvd.so.0" <<<"$tree" &&
    grep -q "libnn.so.0 => $prefix/lib/libnn.so.0" <<<"$tree" ||
    fail "ldd: libhvd.so.0 and libnn.so.0 do not come from $prefix/lib: $tree"
  for l in hvd nn; do
    readelf -d "$prefix/lib/lib$l.so.0.1" | grep NEEDED | grep -E "$cuda_libs" &&
      fail "lib$l.so.0.1 itself needs a CUDA library"
  done
  # LD_DEBUG for the ranks only (-x VAR=value): what mpirun itself loads is not the question.
  # The loader's log goes to files of its own (LD_DEBUG_OUTPUT), apart from the output.
  out=$(cd "$tmp/user" && timeout -k 5 60 mpirun --oversubscribe --bind-to none \
        -x LD_DEBUG=files -x LD_DEBUG_OUTPUT="$tmp/ld.cpu" -np 2 ./cpu_step 2>&1); rc=$?
  grep -q '^rank 0 of 2: loss ' <<<"$out" && [ $rc -eq 0 ] ||
    fail "the CPU program on 2 ranks: exit $rc: $out"
  ls "$tmp"/ld.cpu.* >/dev/null 2>&1 || fail "LD_DEBUG_OUTPUT wrote nothing: the loads were not seen"
  loaded=$(cat "$tmp"/ld.cpu.* 2>/dev/null | grep 'generating link map' | grep -E "$cuda_libs")
  [ -z "$loaded" ] || fail "the CPU program loaded a CUDA library while it ran: $loaded"
  grep '^rank 0' <<<"$out"
  [ $failures -eq 0 ] && echo "ok: a CPU program needs, and loads, no CUDA library"
else
  cat "$tmp/user/cc2.log"
  fail "a CPU program of nn and hvd does not build with pkg-config --cflags --libs hvd nn"
fi

# ---- 4. DESTDIR stages; the prefix stays ----
stage=$tmp/stage
if make -j2 BUILD="$build" "${conf[@]}" PREFIX=/opt/hvd-test DESTDIR="$stage" install > "$tmp/stage.log" 2>&1; then
  [ -f "$stage/opt/hvd-test/lib/libhvd.so.0.1" ] && [ -f "$stage/opt/hvd-test/include/hvd/hvd.h" ] ||
    fail "DESTDIR=$stage PREFIX=/opt/hvd-test: the files are not under $stage/opt/hvd-test"
  grep -qx 'prefix=/opt/hvd-test' "$stage/opt/hvd-test/lib/pkgconfig/hvd.pc" ||
    fail "with DESTDIR, hvd.pc must keep prefix=/opt/hvd-test: $(head -n 1 "$stage/opt/hvd-test/lib/pkgconfig/hvd.pc")"
  [ -e /opt/hvd-test ] && fail "DESTDIR install wrote to /opt/hvd-test itself"
  grep -qx 'Libs: -L${libdir} -Wl,-rpath,${libdir} -lhvd' "$stage/opt/hvd-test/lib/pkgconfig/hvd.pc" ||
    fail "PREFIX=/opt/hvd-test: hvd.pc's Libs has no rpath to \${libdir}: $(grep '^Libs:' "$stage/opt/hvd-test/lib/pkgconfig/hvd.pc")"
else
  tail -n 20 "$tmp/stage.log"; fail "make install DESTDIR=... failed"
fi
# /usr/lib is where the loader always looks: no rpath there.
if make -j2 BUILD="$build" "${conf[@]}" PREFIX=/usr DESTDIR="$tmp/stage_usr" install > "$tmp/stage_usr.log" 2>&1; then
  grep -qx 'Libs: -L${libdir} -lnn' "$tmp/stage_usr/usr/lib/pkgconfig/nn.pc" ||
    fail "PREFIX=/usr: nn.pc's Libs should be plain: $(grep '^Libs:' "$tmp/stage_usr/usr/lib/pkgconfig/nn.pc")"
else
  tail -n 20 "$tmp/stage_usr.log"; fail "make install PREFIX=/usr DESTDIR=... failed"
fi

# ---- 5. the README's install recipe, exactly as written ----
recipe=$(awk '/^## Install$/ { s = 1; next } s && /^## / { exit } s && /^    [^ ]/ { sub(/^    /, ""); print }' README.md)
install_line=$(sed -n 1p <<<"$recipe") cc_line=$(sed -n 2p <<<"$recipe")
echo "README's recipe:"; echo "$recipe"
if [[ "$install_line" != "make install PREFIX=\$HOME/.local"* || "$cc_line" != "cc my_train.c "* ]]; then
  fail "README.md's Install block no longer starts with 'make install PREFIX=\$HOME/.local' and 'cc my_train.c ...': update this test"
else
  mkdir -p "$tmp/home" "$tmp/readme"
  cp "$tmp/user/my_train.c" "$tmp/readme/"
  (
    export HOME=$tmp/home
    unset PKG_CONFIG_PATH
    # The build's configuration (BUILD, CUDA=...) added to the README's make: the line is
    # otherwise run as written.
    make() { command make -j2 BUILD="$build" "${conf[@]}" "$@"; }
    eval "$install_line" > "$tmp/readme/install.log" 2>&1 || { tail -n 20 "$tmp/readme/install.log"; exit 1; }
    cd "$tmp/readme" && eval "$cc_line"
  ) > "$tmp/readme/cc.log" 2>&1 || { cat "$tmp/readme/cc.log"; fail "the README's recipe failed"; }
  if [ -x "$tmp/readme/my_train" ]; then
    out=$(cd "$tmp/readme" && timeout -k 5 30 ./my_train 2>&1); rc=$?
    [ $rc -eq 0 ] && grep -qx 'w\[0\] = 0 on 1 ranks' <<<"$out" ||
      fail "the README recipe's program does not start alone: exit $rc: $out"
    out=$(cd "$tmp/readme" && timeout -k 5 60 mpirun --oversubscribe --bind-to none -np 2 ./my_train 2>&1); rc=$?
    [ $rc -eq 0 ] && grep -qx 'w\[0\] = -0.5 on 2 ranks' <<<"$out" ||
      fail "the README recipe's program under mpirun -np 2: exit $rc: $out"
    ldd "$tmp/readme/my_train" | grep -q "libhvd.so.0 => $tmp/home/.local/lib/libhvd.so.0" ||
      fail "the README recipe's program does not load libhvd.so.0 from \$HOME/.local/lib: $(ldd "$tmp/readme/my_train" | grep hvd)"
    [ $failures -eq 0 ] && echo "ok: the README's recipe builds a program that runs, alone and on 2 ranks"
  else
    fail "the README's recipe built no my_train"
  fi
fi

# ---- 6. the CUDA backends (CUDA builds) ----
if [ $cuda -eq 1 ] && [ -x "$tmp/user/cpu_step" ]; then
  for n in hvd_cuda nn_cuda; do
    exported=$(nm -D --defined-only "$prefix/lib/lib$n.so.0.1" | awk '{print $3}')
    want=$([ $n = hvd_cuda ] && echo hvd_device_plugin_v1 || echo nn_cuda_plugin_v1)
    [ "$exported" = "$want" ] || fail "lib$n.so.0.1 exports '$exported', expected only $want"
  done
  # A device query loads nn's backend (and on this machine finds a GPU or says why not).
  out=$(cd "$tmp/user" && LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld.dev" ./cpu_step device 2>&1); rc=$?
  cat "$tmp"/ld.dev.* 2>/dev/null | grep -q "file=$prefix/lib/libnn_cuda.so.0 .*generating link map" ||
    fail "a device query did not load $prefix/lib/libnn_cuda.so.0"
  grep -E '^(device|to_device):' <<<"$out"
  grep -Eq '^device: CUDA: ([0-9]+ device|no device)' <<<"$out" && [ $rc -eq 0 ] ||
    fail "nn_cuda_info through libnn_cuda: exit $rc: $(grep -E '^(device|to_device)' <<<"$out")"
  # Without the backend: the device is unavailable, the message names the library, the
  # program goes on on the CPU.
  mkdir -p "$tmp/aside"
  mv "$prefix"/lib/libnn_cuda.so.0* "$tmp/aside/"
  out=$(cd "$tmp/user" && ./cpu_step device 2>&1); rc=$?
  mv "$tmp"/aside/libnn_cuda.so.0* "$prefix/lib/"
  grep -q "^to_device: nn_model_to_device: CUDA: nn's CUDA backend libnn_cuda.so.0 could not be loaded" <<<"$out" &&
    grep -q '^rank 0 of 1: loss' <<<"$out" && [ $rc -eq 0 ] ||
    fail "without libnn_cuda.so.0: expected a message naming it and a CPU step: exit $rc: $out"
  # The driver in the process: hvd loads its backend. The toolkit's stub libcuda (every
  # call says "stub library") stands in for the driver where none is installed.
  stub=${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so
  if [ -f "$stub" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    out=$(cd "$tmp/user" && timeout -k 5 60 mpirun --oversubscribe --bind-to none \
          -x LD_DEBUG=files -x LD_DEBUG_OUTPUT="$tmp/ld.stub" -x LD_PRELOAD="$stub" -np 2 \
          ./my_train 2>&1); rc=$?
    cat "$tmp"/ld.stub.* 2>/dev/null | grep -q "file=$prefix/lib/libhvd_cuda.so.0 .*generating link map" ||
      fail "with the driver loaded at start, hvd did not load $prefix/lib/libhvd_cuda.so.0"
    grep -qx 'w\[0\] = -0.5 on 2 ranks' <<<"$out" && [ $rc -eq 0 ] ||
      fail "the README example with libhvd_cuda loaded: exit $rc, expected 'w[0] = -0.5 on 2 ranks'"
    # The driver arriving after hvd_init: the backend is loaded by the background thread
    # at the next collective and started there before use.
    cat > "$tmp/user/late_driver.c" <<'EOF'
#include <hvd/hvd.h>
#include <dlfcn.h>
#include <stdio.h>
static int sum_ok(int tag) {
  float v[4] = {1, 2, 3, 4};
  char name[16];
  snprintf(name, sizeof name, "t%d", tag);
  if (hvd_allreduce(name, v, v, 4, HVD_FLOAT32, HVD_SUM) != HVD_OK) {
    fprintf(stderr, "%s\n", hvd_last_error());
    return 0;
  }
  return v[3] == 4.0f * (float)hvd_size();
}
int main(int argc, char **argv) {
  if (argc < 2 || hvd_init() != HVD_OK) return 1;
  int before = sum_ok(0);
  if (dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  int after = sum_ok(1);
  if (hvd_rank() == 0) printf("sums right: before the driver %d, after %d\n", before, after);
  return hvd_shutdown() == HVD_OK && before && after ? 0 : 1;
}
EOF
    if (cd "$tmp/user" && cc -std=c11 -Wall -Wextra -Werror late_driver.c $(pkg-config --cflags --libs hvd) \
          -ldl -Wl,-rpath,"$libdir" -o late_driver) > "$tmp/user/cc3.log" 2>&1; then
      out=$(cd "$tmp/user" && timeout -k 5 60 mpirun --oversubscribe --bind-to none \
            -x LD_DEBUG=files -x LD_DEBUG_OUTPUT="$tmp/ld.late" -x HVD_LOG_LEVEL=info -np 2 \
            ./late_driver "$stub" 2>&1); rc=$?
      grep -q 'sums right: before the driver 1, after 1' <<<"$out" && [ $rc -eq 0 ] ||
        fail "driver loaded after hvd_init: exit $rc: $out"
      cat "$tmp"/ld.late.* 2>/dev/null | grep -q "file=$prefix/lib/libhvd_cuda.so.0 .*generating link map" ||
        fail "driver loaded after hvd_init: hvd did not load libhvd_cuda.so.0"
      grep -q 'INFO: CUDA: no device' <<<"$out" ||
        fail "driver loaded after hvd_init: the backend's device check did not run (no 'CUDA: no device' line)"
      grep -E '^sums right|INFO: CUDA' <<<"$out"
    else
      cat "$tmp/user/cc3.log"; fail "late_driver.c does not build"
    fi
  else
    echo "note: no stub libcuda at $stub (or a driver is installed): hvd's backend loading not exercised here"
  fi
  [ $failures -eq 0 ] && echo "ok: the CUDA backends are separate libraries, loaded on use"
fi

# ---- 7. the Python package: installed for /usr/bin/python3, found without PYTHONPATH
#         from $HOME/.local (the recipe of 5.), and removed by make uninstall ----
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  site=$(/usr/bin/python3 scripts/python_site.py "$prefix")
  if [ -f "$site/hvd/__init__.py" ] && [ -f "$site/hvd/torch/optimizer.py" ] &&
     [ "$(readlink "$site/hvd/libhvd.so.0")" = "$prefix/lib/libhvd.so.0" ]; then
    out=$(cd "$tmp/user" && PYTHONPATH=$site timeout -k 5 60 mpirun --oversubscribe --bind-to none \
          -x PYTHONPATH -np 2 /usr/bin/python3 -c '
import numpy as np, hvd
hvd.init()
print("python rank %d of %d: sum %s from %s" % (hvd.rank(), hvd.size(),
      hvd.allreduce(np.ones(2), op=hvd.Sum).tolist(), hvd.library()), flush=True)' 2>&1); rc=$?
    # mpirun may join the ranks' lines (seen once: no newline between them).
    grep -q "python rank 0 of 2: sum \[2.0, 2.0\] from $site/hvd/libhvd.so.0" <<<"$out" && [ $rc -eq 0 ] ||
      fail "the installed Python package on 2 ranks: exit $rc: $out"
    grep '^python rank 0' <<<"$out"
  else
    fail "make install did not put the Python package in $site (with hvd/libhvd.so.0 -> $prefix/lib/libhvd.so.0)"
  fi
  out=$(cd "$tmp" && HOME=$tmp/home timeout -k 5 60 /usr/bin/python3 -c 'import hvd; print(hvd.library())' 2>&1)
  [ "$out" = "$(HOME=$tmp/home /usr/bin/python3 -c 'import site; print(site.getusersitepackages())')/hvd/libhvd.so.0" ] ||
    fail "after the README recipe, python3 does not import hvd from \$HOME/.local: $out"
  if make -j2 BUILD="$build" "${conf[@]}" PREFIX="$prefix" uninstall > "$tmp/uninstall.log" 2>&1; then
    [ -e "$site/hvd" ] && fail "make uninstall left the Python package in $site/hvd"
    [ -e "$prefix/lib/libhvd.so.0" ] && fail "make uninstall left lib/libhvd.so.0"
  else
    tail -n 20 "$tmp/uninstall.log"; fail "make uninstall failed"
  fi
  [ $failures -eq 0 ] && echo "ok: the Python package installs, imports and uninstalls"
else
  fail "/usr/bin/python3 with numpy is missing (scripts/install-deps.sh installs it)"
fi

echo "$failures failures"
[ "$failures" -eq 0 ] && echo PASS
[ "$failures" -eq 0 ]
