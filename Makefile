# hvd: one build. Outputs go only under build/.
#   make            build libraries, programs and tests
#   make test       install missing packages, build, run every test
#   make run        install missing packages, build, train lenet on Fashion-MNIST on 2 ranks
#   make install    PREFIX=/usr/local [DESTDIR=]: programs, libraries, headers, pkg-config
#                   files (docs/install.md); make uninstall removes them
#   make clean
# Layout of outputs:
#   build/libnn.a             nn/*.c
#   build/libhvd.a            hvd/*.c + collectives/*.c
#   build/libutil.a           util/*.c: the programs' flag parser and the backend loader
#                             (util/ has no dependency; its headers, e.g. util/clock.h, are
#                             usable everywhere)
#   build/hvd.pc              pkg-config file for user programs (the static libraries)
#   build/lib/                libhvd.so, libnn.so (and in a CUDA build their CUDA halves
#                             libhvd_cuda.so, libnn_cuda.so): the shared libraries of
#                             make install ("shared libraries" below)
#   build/libdata.a           data/*.c: image input (folders, TFRecords, decode, augment)
#   build/libtrain.a          train/*.c but main.c: the train program's parts (data, flags,
#                             checkpoints, callbacks, event files, progress), which the
#                             tests and cnn_bench link too
#   build/train               train/main.c + libtrain.a
#   build/examples/NAME       examples/NAME.c (other examples)
#   build/NAME                bench/NAME.c (one program per file)
#   build/hvdrun              launcher/*.c
#   build/serve               serve/*.c (libmicrohttpd, jansson; docs/serve.md)
#   build/tests/test_NAME     tests/test_NAME.c
#   build/fuzz/fuzz_NAME      tests/fuzz/fuzz_NAME.c + tests/fuzz/replay.c: replays inputs
#                             (files, directories) through a fuzz harness; tests/test_fuzz_regressions.sh
# Sanitizers and fuzzing (docs/testing.md):
#   make SANITIZE=address,undefined test   everything under ASan + UBSan, in build-address-undefined/
#   make SANITIZE=thread test              the runtime tests (hvd/, collectives/) under TSan, in build-thread/
#   make fuzz FUZZ_SECONDS=30              libFuzzer harnesses (clang), in build-fuzz/, each run N s

comma := ,
# ---- sanitizers ----
# SANITIZE is a -fsanitize= list (address,undefined; thread). Its objects go to their own
# directory (build-<list>, unless BUILD is given) so they never mix with the normal build,
# and the list is recorded in $(BUILD)/config.flags so changing it rebuilds everything.
# UBSan errors abort (-fno-sanitize-recover), so a test that trips one fails. The flags
# reach the link lines and build/hvd.pc (a user program must link the sanitizer runtime).
# SANITIZE implies CUDA=0: nvcc's device code is not instrumented, the CUDA driver maps
# memory where ASan keeps its shadow (it needs protect_shadow_gap=0) and the static
# cudart has its own allocator hooks; the GPU paths are checked by scripts/gpu_check.sh.
# thread defines HVD_NO_TARGET_CLONES: target_clones makes an ifunc whose resolver runs
# before TSan's runtime is set up, and crashes it (collectives/reduce.c then has one
# portable copy of each loop). Runtime options and suppressions: tests/sanitize/.
SANITIZE ?=
ifneq ($(SANITIZE),)
  BUILD ?= build-$(subst $(comma),-,$(SANITIZE))
  ifeq ($(CUDA),1)
    $(error SANITIZE=$(SANITIZE) with CUDA=1: sanitizer builds are CPU-only (CUDA=0); see the Makefile)
  endif
  override CUDA := 0
  SAN_LIST  := $(subst $(comma), ,$(SANITIZE))
  SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
  # gcc leaves float-cast-overflow out of undefined (clang has it): asked for by name.
  SAN_FLAGS += $(if $(filter undefined,$(SAN_LIST)),-fsanitize=float-cast-overflow \
                 -fno-sanitize-recover=undefined$(comma)float-cast-overflow)
  SAN_FLAGS += $(if $(filter thread,$(SAN_LIST)),-DHVD_NO_TARGET_CLONES)
endif
# FUZZ=1 (set by `make fuzz`): clang, coverage for libFuzzer in every object, the harnesses
# linked with libFuzzer's main instead of tests/fuzz/replay.c.
FUZZ ?=
ifeq ($(FUZZ),1)
  SAN_FLAGS += -fsanitize=fuzzer-no-link
endif

BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
# Portable baseline: no -march=native. Hot loops pick AVX2/FMA at run time
# (__attribute__((target)) + __builtin_cpu_supports) where it pays.
CFLAGS  ?= $(OPT) -g
# -fPIC everywhere: the same objects go into the static libraries, the programs and the
# shared libraries of `make install` (position-independent code costs nothing measurable
# on x86-64, and one set of objects keeps the two kinds of library identical).
CFLAGS  += -std=c11 -Wall -Wextra -D_GNU_SOURCE -pthread -fPIC -I. -MMD -MP $(SAN_FLAGS)

# ---- MPI, BLAS and zlib: the system's, or stand-ins for the device check ----
# MPI=system (default): the compile and link flags of the MPI compiler wrapper (OpenMPI:
#   --showme; MPICH: -compile_info/-link_info), so plain cc builds.
# MPI=stub: scripts/gpu_check/stub/mpi, a single-process MPI (hvd at size 1) for a machine
#   without one; BLAS=ref: scripts/gpu_check/stub/blas, a plain C SGEMM instead of
#   OpenBLAS; ZLIB=none: scripts/gpu_check/stub/nozlib (crc32, no gzip). The device
#   machine has none of the three; scripts/gpu_check.sh builds there with
#   `make MPI=stub BLAS=ref` (and ZLIB=none when it lacks zlib), so the GPU check and the
#   normal build are one build. hwloc is hvdrun's alone.
MPI  ?= system
BLAS ?= openblas
ZLIB ?= system
STUB_DIR := scripts/gpu_check/stub
ifeq ($(MPI),stub)
  MPI_CFLAGS  := -I$(STUB_DIR)/mpi
  MPI_LDFLAGS :=
  HVD_STUB_SRC := $(STUB_DIR)/mpi/mpi_stub.c
else ifeq ($(MPI),system)
  MPICC        ?= mpicc
  MPI_CFLAGS   := $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -compile_info 2>/dev/null | cut -d' ' -f2-)
  MPI_LDFLAGS  := $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -link_info 2>/dev/null | cut -d' ' -f2-)
else
  $(error MPI=$(MPI): use MPI=system (the MPI compiler wrapper's flags) or MPI=stub (one process, for the GPU check))
endif
ifeq ($(BLAS),ref)
  BLAS_CFLAGS  := -I$(STUB_DIR)/blas
  BLAS_LDFLAGS :=
  NN_STUB_SRC  := $(STUB_DIR)/blas/cblas_stub.c
else ifeq ($(BLAS),openblas)
  BLAS_CFLAGS  := $(shell pkg-config --cflags openblas 2>/dev/null)
  BLAS_LDFLAGS := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
else
  $(error BLAS=$(BLAS): use BLAS=openblas or BLAS=ref (a plain C SGEMM, for the GPU check))
endif
ifeq ($(ZLIB),none)
  ZLIB_CFLAGS  := -I$(STUB_DIR)/nozlib
  ZLIB_LDFLAGS :=
  TRAIN_STUB_SRC := $(STUB_DIR)/nozlib/zlib.c
else ifeq ($(ZLIB),system)
  ZLIB_CFLAGS  :=
  ZLIB_LDFLAGS := -lz
else
  $(error ZLIB=$(ZLIB): use ZLIB=system or ZLIB=none (crc32 only, no gzip; for the GPU check))
endif
HWLOC_LDFLAGS := $(shell pkg-config --libs hwloc 2>/dev/null || echo -lhwloc)

# ---- protobuf messages (protobuf-c) ----
# The .proto files under proto/ keep their upstream paths, package names and field numbers
# (TensorFlow's Example, TF Serving's APIs, ONNX), so files and clients of those formats
# work unchanged. protoc-c compiles each into $(GEN)/<path>.pb-c.{c,h}; code includes
# "<path>.pb-c.h" (-I$(GEN)), links $(call proto_c,<.proto files>) and lists
# $(call proto_h,<.proto files>) as prerequisites of its objects (the headers must exist
# before the first compile). PROTOBUF=system (default): protoc-c and libprotobuf-c;
# PROTOBUF=none: neither (the GPU check's machine has no protobuf-c): proto_c and proto_h
# are empty, and code that parses messages is compiled with HVD_NO_PROTOBUF and fails at
# run time saying the build has no protobuf-c.
PROTOBUF ?= system
GEN      := $(BUILD)/gen
ifeq ($(PROTOBUF),system)
  PROTOC_C        ?= protoc-c
  PROTOBUF_CFLAGS := -I$(GEN) $(shell pkg-config --cflags libprotobuf-c 2>/dev/null)
  PROTOBUF_LDLIBS := $(shell pkg-config --libs libprotobuf-c 2>/dev/null || echo -lprotobuf-c)
else ifeq ($(PROTOBUF),none)
  PROTOBUF_CFLAGS := -DHVD_NO_PROTOBUF
  PROTOBUF_LDLIBS :=
else
  $(error PROTOBUF=$(PROTOBUF): use PROTOBUF=system (protoc-c and libprotobuf-c) or PROTOBUF=none (no protobuf messages; for the GPU check))
endif
proto_c = $(if $(filter system,$(PROTOBUF)),$(patsubst proto/%.proto,$(GEN)/%.pb-c.c,$(1)))
proto_h = $(if $(filter system,$(PROTOBUF)),$(patsubst proto/%.proto,$(GEN)/%.pb-c.h,$(1)))
$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: proto/%.proto
	@mkdir -p $(GEN)
	$(PROTOC_C) --proto_path=proto --c_out=$(GEN) $<

CFLAGS  += $(MPI_CFLAGS) $(BLAS_CFLAGS) $(ZLIB_CFLAGS) $(PROTOBUF_CFLAGS)
LDLIBS  := $(MPI_LDFLAGS) $(BLAS_LDFLAGS) $(ZLIB_LDFLAGS) -lm -lpthread

# The loaders of the CUDA backends (nn/cuda_loader.c, hvd/device_loader.c, both on
# util/plugin.c) and the backends' entry points (nn/cuda/plugin.c, hvd/device_plugin.c)
# belong to the shared libraries alone (see "shared libraries" below): the static ones
# link CUDA directly.
UTIL_PLUGIN_SRC := util/plugin.c
NN_LOADER_SRC  := nn/cuda_loader.c
NN_PLUGIN_SRC  := nn/cuda/plugin.c
HVD_LOADER_SRC := hvd/device_loader.c
HVD_PLUGIN_SRC := hvd/device_plugin.c
HVD_DEVICE_SRC := hvd/device.c hvd/device_cast.c hvd/device_events.c
NN_SRC    := $(filter-out $(NN_LOADER_SRC),$(wildcard nn/*.c)) $(NN_STUB_SRC)
HVD_SRC   := $(filter-out $(HVD_LOADER_SRC) $(HVD_PLUGIN_SRC),$(wildcard hvd/*.c)) \
             $(wildcard collectives/*.c) $(HVD_STUB_SRC)
UTIL_SRC  := $(wildcard util/*.c)
TEST_SRC  := $(wildcard tests/test_*.c)
TEST_LIB_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
BENCH_SRC := $(wildcard bench/*.c)
TRAIN_LIB_SRC := $(filter-out train/main.c,$(wildcard train/*.c)) $(TRAIN_STUB_SRC)
EX_SRC    := $(wildcard examples/*.c)
LAUNCH_SRC := $(wildcard launcher/*.c)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)

# ---- CUDA (nn/cuda, NCCL allreduce of device memory) ----
# CUDA=0 forces off; CUDA=1 insists (fails clearly when nvcc or a library is missing);
# CUDA=auto (the default) turns it on when nvcc and the cuDNN, cuBLAS and NCCL headers
# are found. The CPU-only build is unchanged when off. Objects depend on
# $(BUILD)/config.cuda, so switching CUDA on or off rebuilds everything. The CUDA runtime is linked statically
# (libcudart_static) so binaries start on machines without a GPU driver; cuDNN, cuBLAS
# and NCCL load without one too. Device code: sm_90 and sm_80 SASS plus compute_90 PTX.
CUDA      ?= auto
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
NVCC_OK   := $(if $(NVCC),$(shell test -x '$(NVCC)' && echo 1))
# Where cudnn.h, nccl.h and cublas_v2.h are (one or more directories; the device
# machine's come from Python wheels), and how to link the libraries.
CUDA_INC_DIRS ?= $(CUDA_HOME)/include
CUDA_HDRS := $(and $(wildcard $(addsuffix /cudnn.h,$(CUDA_INC_DIRS))),$(wildcard $(addsuffix /nccl.h,$(CUDA_INC_DIRS))),$(wildcard $(addsuffix /cublas_v2.h,$(CUDA_INC_DIRS))))
ifeq ($(CUDA),1)
  ifneq ($(NVCC_OK),1)
    $(error CUDA=1 but no nvcc: '$(NVCC)' is not an executable, and none was found in PATH or $(CUDA_HOME)/bin (set CUDA_HOME or NVCC))
  endif
  ifeq ($(CUDA_HDRS),)
    $(error CUDA=1 but cudnn.h, nccl.h or cublas_v2.h is missing under $(CUDA_INC_DIRS) (set CUDA_HOME or CUDA_INC_DIRS))
  endif
  USE_CUDA := 1
else ifeq ($(CUDA),auto)
  USE_CUDA := $(if $(and $(NVCC_OK),$(CUDA_HDRS)),1)
endif
ifeq ($(USE_CUDA),1)
  CUDA_DEFS    := -DNN_WITH_CUDA=1 -DHVD_WITH_CUDA=1 -DHVD_WITH_CUDNN=1 -DHVD_WITH_CUBLAS=1 -DHVD_WITH_NCCL=1
  CUDA_ARCH    ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
                  -gencode arch=compute_90,code=compute_90
  NVCCFLAGS    ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra
  NVCCFLAGS    += -Xcompiler -fPIC -I. $(addprefix -I,$(CUDA_INC_DIRS)) $(CUDA_DEFS) -MMD -MP
  CFLAGS       += $(CUDA_DEFS) $(addprefix -I,$(CUDA_INC_DIRS))
  CUDA_LIBDIR  := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
  CUDA_LDLIBS  ?= -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudnn -lcublas -lcublasLt \
                  -lnccl -lcudart_static
  LDLIBS       += $(CUDA_LDLIBS) -ldl -lrt -lstdc++
  NN_SRC       += $(filter-out $(NN_PLUGIN_SRC),$(wildcard nn/cuda/*.c))
  NN_CU_SRC    := $(wildcard nn/cuda/*.cu)
  HVD_CU_SRC   := $(wildcard hvd/*.cu)
endif

CONFIG_STAMP := $(BUILD)/config.cuda $(BUILD)/config.flags
$(shell mkdir -p $(BUILD) && (echo 'USE_CUDA=$(USE_CUDA)' | cmp -s - $(BUILD)/config.cuda || echo 'USE_CUDA=$(USE_CUDA)' > $(BUILD)/config.cuda))
# PIC=1: objects built before -fPIC (they cannot go into a shared library) are rebuilt.
CONFIG_FLAGS := CC=$(CC) SAN_FLAGS=$(strip $(SAN_FLAGS)) MPI=$(MPI) BLAS=$(BLAS) ZLIB=$(ZLIB) PROTOBUF=$(PROTOBUF) PIC=1
$(shell echo '$(CONFIG_FLAGS)' | cmp -s - $(BUILD)/config.flags || echo '$(CONFIG_FLAGS)' > $(BUILD)/config.flags)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cuobj = $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(1))

LIBNN  := $(BUILD)/libnn.a
LIBHVD := $(BUILD)/libhvd.a
LIBUTIL := $(BUILD)/libutil.a
TESTS  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst bench/%.c,$(BUILD)/%,$(BENCH_SRC))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_SRC))
LIBTRAIN := $(BUILD)/libtrain.a
TRAIN  := $(BUILD)/train
HVDRUN := $(if $(LAUNCH_SRC),$(BUILD)/hvdrun)
FUZZERS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
# What the harnesses link: hvdrun's pieces without its main().
LIBLAUNCHER := $(BUILD)/fuzz/liblauncher.a
FUZZ_MAIN   := $(if $(filter 1,$(FUZZ)),-fsanitize=fuzzer,$(call obj,tests/fuzz/replay.c))
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 30

.PHONY: all test run deps clean fuzz fuzzers fuzz-seeds shared install uninstall
all: $(LIBNN) $(LIBHVD) $(LIBUTIL) $(LIBTRAIN) $(BUILD)/hvd.pc $(TESTS) $(BENCHES) $(EXAMPLES) $(TRAIN) $(HVDRUN) \
     $(FUZZERS) $(BUILD)/serve

# ---- ONNX models in nn (nn/onnx_import.c, nn/onnx_export.c) ----
# ONNX's messages compiled into libnn; everything linking libnn links protobuf-c.
ONNX_PROTO := proto/onnx/onnx.proto
NN_SRC     += $(call proto_c,$(ONNX_PROTO))
LDLIBS     += $(PROTOBUF_LDLIBS)
$(call obj,nn/onnx_import.c nn/onnx_export.c): $(call proto_h,$(ONNX_PROTO))
$(BUILD)/serve: SERVE_LDLIBS += $(PROTOBUF_LDLIBS)
$(BUILD)/lib/libnn.so.0.1: BLAS_LDFLAGS += $(PROTOBUF_LDLIBS)

$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# ASan's use-after-scope checks in nn/conv_direct.c's unrolled vector kernels made it the
# slowest object to build, 37-49 s under ASan against 15 s without them (heap and stack
# overflows are still caught): the CI's two cores wait for it.
$(BUILD)/obj/nn/conv_direct.o: CFLAGS += $(if $(filter address,$(SAN_LIST)),-fno-sanitize-address-use-after-scope)

$(BUILD)/obj/%.cu.o: %.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIBNN): $(call obj,$(NN_SRC)) $(call cuobj,$(NN_CU_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBHVD): $(call obj,$(HVD_SRC)) $(call cuobj,$(HVD_CU_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/hvd.pc: Makefile $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	@printf '%s\n' \
	  'prefix=$(abspath $(BUILD))' \
	  'srcdir=$(abspath .)' \
	  'Name: hvd' \
	  'Description: data-parallel training runtime (allreduce over MPI)' \
	  'Version: 0.1' \
	  'Cflags: -I$${srcdir}/hvd -I$${srcdir} $(MPI_CFLAGS) $(strip $(SAN_FLAGS))' \
	  'Libs: -L$${prefix} -lhvd $(LDLIBS) $(strip $(SAN_FLAGS))' > $@

# ---- shared libraries and `make install` (docs/install.md) ----
# $(BUILD)/lib/libhvd.so.0.1 and libnn.so.0.1 (sonames libhvd.so.0, libnn.so.0; the
# symlinks libX.so.0 and libX.so beside them), in a directory of their own so that
# -L$(BUILD) (build/hvd.pc, the tests, the programs) keeps linking the static libraries.
# The shared ones link no CUDA library. In a CUDA build the device halves are libraries
# of their own: libhvd_cuda.so.0 (hvd/device.c, device_cast.c, device_events.c, hvd/*.cu; NCCL) and
# libnn_cuda.so.0 (nn/cuda/; cuDNN, cuBLAS), which hvd/device_loader.c and
# nn/cuda_loader.c, linked into libhvd.so and libnn.so in their place, load with dlopen
# when a device is used. A backend exports only its entry point (a version script), so
# its own calls never bind to the loader's functions of the same names; it uses the
# shared CUDA runtime (one runtime for both backends and the program). --no-undefined: a
# library that could not load fails to link instead. Not built under a sanitizer or for
# fuzzing (their runtimes belong to the program, not to a shared library).
VERSION   := 0.1
SOVERSION := 0
SHLIB     := $(BUILD)/lib
so_file    = $(SHLIB)/lib$(1).so.$(VERSION)
LIBHVD_SO := $(call so_file,hvd)
LIBNN_SO  := $(call so_file,nn)
ifeq ($(USE_CUDA),1)
  LIBHVD_SO_OBJS   := $(call obj,$(filter-out $(HVD_DEVICE_SRC),$(HVD_SRC)) $(HVD_LOADER_SRC) \
                        $(UTIL_PLUGIN_SRC))
  HVD_CUDA_SO_OBJS := $(call obj,$(HVD_DEVICE_SRC) $(HVD_PLUGIN_SRC)) $(call cuobj,$(HVD_CU_SRC))
  LIBNN_SO_OBJS    := $(call obj,$(filter-out nn/cuda/%,$(NN_SRC)) $(NN_LOADER_SRC) \
                        $(UTIL_PLUGIN_SRC))
  NN_CUDA_SO_OBJS  := $(call obj,$(filter nn/cuda/%,$(NN_SRC)) $(NN_PLUGIN_SRC)) $(call cuobj,$(NN_CU_SRC))
  CUDA_BACKENDS    := $(call so_file,hvd_cuda) $(call so_file,nn_cuda)
  # The libraries of CUDA_LDLIBS, with the shared runtime for the static one: where
  # CUDA_LDLIBS names other files (scripts/gpu_check.sh passes the Python wheels' cuDNN,
  # cuBLAS and NCCL), the backends link those too.
  CUDA_SO_LDLIBS   ?= $(subst libcudart_static.a,libcudart.so,$(subst -lcudart_static,-lcudart,$(CUDA_LDLIBS))) \
                      -lstdc++
else
  LIBHVD_SO_OBJS   := $(call obj,$(HVD_SRC))
  LIBNN_SO_OBJS    := $(call obj,$(NN_SRC))
endif
SHARED_LIBS   := $(LIBHVD_SO) $(LIBNN_SO) $(CUDA_BACKENDS)
SHARED_IN_ALL := $(if $(SANITIZE)$(FUZZ),,$(SHARED_LIBS))
SO_LINK = $(CC) $(CFLAGS) -shared -Wl,--no-undefined -Wl,-soname,$(notdir $(basename $@))
# The symlinks of lib$(1): the soname (what the loader looks for) and, unless $(2) is
# "nodev", the name -l$(1) links.
so_links = ln -sf lib$(1).so.$(VERSION) $(SHLIB)/lib$(1).so.$(SOVERSION) \
  $(if $(2),,&& ln -sf lib$(1).so.$(SOVERSION) $(SHLIB)/lib$(1).so)

shared: $(SHARED_LIBS)
all: $(SHARED_IN_ALL)

$(LIBHVD_SO): $(LIBHVD_SO_OBJS)
	@mkdir -p $(dir $@)
	$(SO_LINK) $^ $(MPI_LDFLAGS) -ldl -lm -lpthread -o $@
	$(call so_links,hvd)

$(LIBNN_SO): $(LIBNN_SO_OBJS)
	@mkdir -p $(dir $@)
	$(SO_LINK) $^ $(BLAS_LDFLAGS) -ldl -lm -lpthread -o $@
	$(call so_links,nn)

# A backend: its objects, the library it serves (recorded by soname, found beside it
# through $$ORIGIN), the CUDA libraries it uses (--as-needed: only those).
$(SHLIB)/%_cuda.map:
	@mkdir -p $(dir $@)
	printf '{ global: %s_plugin_v1; local: *; };\n' $(if $(filter hvd,$*),hvd_device,nn_cuda) > $@

$(call so_file,hvd_cuda): $(HVD_CUDA_SO_OBJS) $(LIBHVD_SO) $(SHLIB)/hvd_cuda.map
	$(SO_LINK) -Wl,--version-script=$(SHLIB)/hvd_cuda.map -Wl,-rpath,'$$ORIGIN' \
	  $(HVD_CUDA_SO_OBJS) $(LIBHVD_SO) -Wl,--as-needed $(CUDA_SO_LDLIBS) -lm -lpthread -o $@
	$(call so_links,hvd_cuda,nodev)

$(call so_file,nn_cuda): $(NN_CUDA_SO_OBJS) $(LIBNN_SO) $(SHLIB)/nn_cuda.map
	$(SO_LINK) -Wl,--version-script=$(SHLIB)/nn_cuda.map -Wl,-rpath,'$$ORIGIN' \
	  $(NN_CUDA_SO_OBJS) $(LIBNN_SO) -Wl,--as-needed $(CUDA_SO_LDLIBS) -lm -lpthread -o $@
	$(call so_links,nn_cuda,nodev)

# make install [PREFIX=/usr/local] [DESTDIR=]: the programs, both kinds of library, the
# public headers (as <hvd/hvd.h>, <nn/nn.h>, <nn/nn_cuda.h>) and pkg-config files whose
# prefix is PREFIX (DESTDIR only stages the files). Libs.private: what a static link
# (pkg-config --static) needs besides the archive.
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL_DIR     = $(DESTDIR)$(PREFIX)
INSTALL_BINS   := $(TRAIN) $(HVDRUN) $(BUILD)/cnn_bench $(BUILD)/allreduce_bench $(BUILD)/serve
INSTALL_HEADERS := hvd/hvd.h nn/nn.h nn/nn_cuda.h
STATIC_CUDA    := $(if $(filter 1,$(USE_CUDA)),$(CUDA_LDLIBS) -ldl -lrt -lstdc++)
# Libs carries an rpath to PREFIX/lib unless that is /usr/lib, which the loader always
# searches: a program linked with `pkg-config --libs hvd` against PREFIX=$$HOME/.local (or
# /usr/local before ldconfig) then starts without LD_LIBRARY_PATH.
PC_RPATH = $(if $(filter /usr /usr/,$(PREFIX)),,-Wl$(comma)-rpath$(comma)$${libdir} )
# pc_file NAME DESCRIPTION PRIVATE-LIBS
pc_file = printf '%s\n' 'prefix=$(PREFIX)' 'exec_prefix=$${prefix}' 'libdir=$${exec_prefix}/lib' \
  'includedir=$${prefix}/include' '' 'Name: $(1)' 'Description: $(2)' 'Version: $(VERSION)' \
  'Cflags: -I$${includedir}' 'Libs: -L$${libdir} $(PC_RPATH)-l$(1)' 'Libs.private: $(strip $(3))' \
  > $(INSTALL_DIR)/lib/pkgconfig/$(1).pc

ifneq ($(filter install,$(MAKECMDGOALS)),)
  ifneq ($(SANITIZE)$(FUZZ),)
    $(error make install: install from a plain build (a SANITIZE or FUZZ build has no shared libraries))
  endif
endif
install: $(SHARED_LIBS) $(LIBHVD) $(LIBNN) $(INSTALL_BINS)
	install -d $(INSTALL_DIR)/bin $(INSTALL_DIR)/lib/pkgconfig $(INSTALL_DIR)/include/hvd \
	  $(INSTALL_DIR)/include/nn
	install -m 755 $(INSTALL_BINS) $(INSTALL_DIR)/bin/
	install -m 644 $(LIBHVD) $(LIBNN) $(INSTALL_DIR)/lib/
	install -m 755 $(SHARED_LIBS) $(INSTALL_DIR)/lib/
	cp -P $(foreach f,$(SHARED_LIBS),$(basename $(f))) $(SHLIB)/libhvd.so $(SHLIB)/libnn.so \
	  $(INSTALL_DIR)/lib/
	for h in $(INSTALL_HEADERS); do install -m 644 $$h $(INSTALL_DIR)/include/$$h || exit 1; done
	$(call pc_file,hvd,data-parallel training runtime (allreduce over MPI),$(MPI_LDFLAGS) $(STATIC_CUDA) -lm -lpthread)
	$(call pc_file,nn,tensors$(comma) layers and models for CPU and CUDA,$(BLAS_LDFLAGS) $(STATIC_CUDA) -lm -lpthread)

uninstall:
	rm -f $(addprefix $(INSTALL_DIR)/bin/,$(notdir $(INSTALL_BINS))) \
	  $(addprefix $(INSTALL_DIR)/include/,$(INSTALL_HEADERS)) \
	  $(INSTALL_DIR)/lib/pkgconfig/hvd.pc $(INSTALL_DIR)/lib/pkgconfig/nn.pc \
	  $(INSTALL_DIR)/lib/libhvd.a $(INSTALL_DIR)/lib/libnn.a $(INSTALL_DIR)/lib/libhvd.so \
	  $(INSTALL_DIR)/lib/libnn.so $(addprefix $(INSTALL_DIR)/lib/,$(foreach n,hvd nn hvd_cuda nn_cuda,lib$(n).so.$(SOVERSION) lib$(n).so.$(VERSION)))
	-rmdir $(INSTALL_DIR)/include/hvd $(INSTALL_DIR)/include/nn 2>/dev/null

# ---- the Python package hvd (python/hvd, docs/python.md) in make install ----
# Installed where PYTHON finds the modules of PREFIX (scripts/python_site.py: /usr/local
# -> Debian's dist-packages, $HOME/.local -> the user site), with hvd/libhvd.so.0 a
# symlink to PREFIX/lib's, which the package loads. Without PYTHON it is left out, saying so.
PYTHON      ?= /usr/bin/python3
PYTHON_SITE ?= $(shell $(PYTHON) scripts/python_site.py $(PREFIX) 2>/dev/null)
PY_PACKAGE  := $(wildcard python/hvd/*.py) $(wildcard python/hvd/torch/*.py)
install: install-python
uninstall: uninstall-python
.PHONY: install-python uninstall-python
install-python:
	@site='$(PYTHON_SITE)'; if [ -z "$$site" ]; then \
	  echo "make install: $(PYTHON) not found: the Python package hvd is not installed (set PYTHON=)"; \
	else set -e; d='$(DESTDIR)'"$$site/hvd"; \
	  install -d "$$d/torch"; \
	  install -m 644 $(filter python/hvd/%,$(filter-out python/hvd/torch/%,$(PY_PACKAGE))) "$$d/"; \
	  install -m 644 $(filter python/hvd/torch/%,$(PY_PACKAGE)) "$$d/torch/"; \
	  ln -sf '$(PREFIX)/lib/libhvd.so.$(SOVERSION)' "$$d/libhvd.so.$(SOVERSION)"; \
	  echo "installed the Python package hvd in $$site (for $(PYTHON))"; fi

uninstall-python:
	@site='$(PYTHON_SITE)'; if [ -n "$$site" ] && [ -f '$(DESTDIR)'"$$site/hvd/_lib.py" ]; then \
	  rm -rf '$(DESTDIR)'"$$site/hvd"; fi

$(LIBTRAIN): $(call obj,$(TRAIN_LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Never empty (an archive with no members is still a valid archive).
$(LIBUTIL): $(call obj,$(UTIL_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Under ASan (not fuzzing) the programs that start MPI also link
# tests/sanitize/keep_modules.c, a dlclose that keeps modules loaded, so that
# LeakSanitizer can name the OpenMPI components' frames at exit (that file says why).
KEEP_MODULES := $(if $(filter address,$(SAN_LIST)),$(if $(filter 1,$(FUZZ)),,\
                  $(call obj,tests/sanitize/keep_modules.c)))

$(BUILD)/tests/%: $(call obj,tests/%.c $(TEST_LIB_SRC)) $(KEEP_MODULES) $(LIBTRAIN) $(LIBNN) \
                  $(LIBHVD) $(LIBUTIL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(filter %.o,$^) $(LIBTRAIN) $(LIBNN) $(LIBHVD) $(LIBUTIL) $(LDLIBS) -o $@

$(BUILD)/%: $(call obj,bench/%.c) $(KEEP_MODULES) $(LIBTRAIN) $(LIBNN) $(LIBHVD) $(LIBUTIL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(KEEP_MODULES) $(LIBTRAIN) $(LIBNN) $(LIBHVD) $(LIBUTIL) $(LDLIBS) -o $@

$(BUILD)/examples/%: $(call obj,examples/%.c) $(KEEP_MODULES) $(LIBNN) $(LIBHVD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(KEEP_MODULES) $(LIBNN) $(LIBHVD) $(LDLIBS) -o $@

$(BUILD)/train: $(call obj,train/main.c) $(KEEP_MODULES) $(LIBTRAIN) $(LIBNN) $(LIBHVD) $(LIBUTIL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(KEEP_MODULES) $(LIBTRAIN) $(LIBNN) $(LIBHVD) $(LIBUTIL) $(LDLIBS) -o $@

$(BUILD)/hvdrun: $(call obj,$(LAUNCH_SRC)) $(LIBUTIL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ $(HWLOC_LDFLAGS) -o $@

$(LIBLAUNCHER): $(call obj,$(filter-out launcher/hvdrun.c,$(LAUNCH_SRC)))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/%: $(call obj,tests/fuzz/%.c) $(filter %.o,$(FUZZ_MAIN)) $(LIBTRAIN) $(LIBLAUNCHER) \
                 $(LIBNN) $(LIBHVD) $(LIBUTIL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(FUZZ_MAIN) $(LIBTRAIN) $(LIBLAUNCHER) $(LIBNN) $(LIBHVD) $(LIBUTIL) $(LDLIBS) \
	  $(HWLOC_LDFLAGS) -o $@

fuzzers: $(FUZZERS)

# ---- image input (data/, docs/data.md) ----
# build/libdata.a: data/*.c and TensorFlow's Example messages (protobuf-c): folders of
# JPEG/PNG, list files, TFRecords, decode threads, torchvision's transforms. train, the
# benches and the tests link it after libtrain. IMAGES=system (default): libjpeg-turbo
# (its TurboJPEG API, and its libjpeg API for decoding part of an image) and libpng;
# IMAGES=none: neither (the GPU check's machine has none): data/ (and the test that
# makes its own JPEGs and PNGs) is compiled with HVD_NO_IMAGES and image input fails at
# run time saying so. The setting is recorded in $(BUILD)/config.images so that changing
# it rebuilds data/.
IMAGES ?= system
ifeq ($(IMAGES),system)
  IMAGES_CFLAGS := $(shell pkg-config --cflags libturbojpeg libjpeg libpng 2>/dev/null)
  IMAGES_LDLIBS := $(shell pkg-config --libs libturbojpeg libjpeg libpng 2>/dev/null || echo -lturbojpeg -ljpeg -lpng)
else ifeq ($(IMAGES),none)
  IMAGES_CFLAGS := -DHVD_NO_IMAGES
  IMAGES_LDLIBS :=
else
  $(error IMAGES=$(IMAGES): use IMAGES=system (libjpeg-turbo and libpng) or IMAGES=none (no image decoding; for the GPU check))
endif
$(shell echo 'IMAGES=$(IMAGES)' | cmp -s - $(BUILD)/config.images || echo 'IMAGES=$(IMAGES)' > $(BUILD)/config.images)
DATA_SRC    := $(wildcard data/*.c)
DATA_PROTOS := proto/tensorflow/core/example/example.proto proto/tensorflow/core/example/feature.proto
DATA_OBJS   := $(call obj,$(DATA_SRC) $(call proto_c,$(DATA_PROTOS)))
LIBDATA     := $(BUILD)/libdata.a
DATA_LDLIBS := $(LIBDATA) $(IMAGES_LDLIBS) $(PROTOBUF_LDLIBS) -lm -lpthread
$(call obj,$(DATA_SRC) tests/test_data_images.c): CFLAGS += $(IMAGES_CFLAGS)
$(call obj,$(DATA_SRC) tests/test_data_images.c): $(call proto_h,$(DATA_PROTOS)) $(BUILD)/config.images
# The resample's row loops are written for the vectoriser, which gcc runs fully at -O3.
$(call obj,data/transform.c): CFLAGS += -O3
$(LIBDATA): $(DATA_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
DATA_USERS := $(TESTS) $(BENCHES) $(TRAIN) $(FUZZERS)
$(DATA_USERS): $(LIBDATA)
$(DATA_USERS): LDLIBS += $(DATA_LDLIBS)
all: $(LIBDATA)

# ---- serve (docs/serve.md): a trained model behind TF Serving's REST API ----
# serve/*.c + libnn + libutil (never hvd: docs/architecture.md), libmicrohttpd and jansson
# (scripts/install-deps.sh), nn's BLAS and CUDA libraries; no MPI.
SERVE_SRC     := $(wildcard serve/*.c)
SERVE_CFLAGS  := $(shell pkg-config --cflags libmicrohttpd jansson 2>/dev/null)
SERVE_LDLIBS  := $(shell pkg-config --libs libmicrohttpd jansson 2>/dev/null || echo -lmicrohttpd -ljansson)
# gRPC (serve/grpc_*.c, docs/serve.md): nghttp2 for HTTP/2 and TF Serving's messages
# from proto/ with protobuf-c (PROTOBUF=none: serve refuses --grpc-port, saying so).
SERVE_PROTO   := $(addprefix proto/,google/protobuf/any.proto google/protobuf/wrappers.proto \
                   tensorflow/core/framework/types.proto tensorflow/core/framework/tensor_shape.proto \
                   tensorflow/core/framework/tensor.proto tensorflow/core/protobuf/meta_graph.proto \
                   tensorflow/core/protobuf/error_codes.proto tensorflow_serving/util/status.proto \
                   tensorflow_serving/apis/model.proto tensorflow_serving/apis/predict.proto \
                   tensorflow_serving/apis/get_model_metadata.proto \
                   tensorflow_serving/apis/get_model_status.proto \
                   tensorflow/core/example/feature.proto tensorflow/core/example/example.proto \
                   tensorflow_serving/apis/input.proto tensorflow_serving/apis/classification.proto)
SERVE_PROTO_OBJ := $(call obj,$(call proto_c,$(SERVE_PROTO)))
# Encoded images (serve/image_input.c): data/'s decoder (libdata.a, TurboJPEG and libpng).
SERVE_CFLAGS  += $(shell pkg-config --cflags libnghttp2 2>/dev/null)
SERVE_LDLIBS  += $(shell pkg-config --libs libnghttp2 2>/dev/null || echo -lnghttp2) $(PROTOBUF_LDLIBS) \
                 $(DATA_LDLIBS)
$(call obj,$(SERVE_SRC)): | $(call proto_h,$(SERVE_PROTO))
$(call obj,$(SERVE_SRC)): CFLAGS += $(SERVE_CFLAGS)
$(BUILD)/serve: $(call obj,$(SERVE_SRC)) $(SERVE_PROTO_OBJ) $(LIBNN) $(LIBUTIL) $(LIBDATA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call obj,$(SERVE_SRC)) $(SERVE_PROTO_OBJ) $(LIBNN) $(LIBUTIL) $(SERVE_LDLIBS) $(BLAS_LDFLAGS) \
	  $(if $(filter 1,$(USE_CUDA)),$(CUDA_LDLIBS) -ldl -lrt -lstdc++) -lm -lpthread -o $@

# The fuzz harness of the gRPC request decoding (tests/fuzz/fuzz_grpc_predict.c): serve's
# objects but main.c and http.c.
SERVE_FUZZ_OBJ := $(call obj,$(filter-out serve/main.c serve/http.c,$(SERVE_SRC)))
$(call obj,tests/fuzz/fuzz_grpc_predict.c): | $(call proto_h,$(SERVE_PROTO))
$(BUILD)/fuzz/fuzz_grpc_predict: $(call obj,tests/fuzz/fuzz_grpc_predict.c) $(filter %.o,$(FUZZ_MAIN)) \
                                 $(SERVE_FUZZ_OBJ) $(SERVE_PROTO_OBJ) $(LIBNN) $(LIBUTIL) $(LIBDATA)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(FUZZ_MAIN) $(SERVE_FUZZ_OBJ) $(SERVE_PROTO_OBJ) $(LIBNN) $(LIBUTIL) \
	  $(SERVE_LDLIBS) $(BLAS_LDFLAGS) \
	  $(if $(filter 1,$(USE_CUDA)),$(CUDA_LDLIBS) -ldl -lrt -lstdc++) -lm -lpthread -o $@

# The GPU check's bare training loop (its fallback throughput run); built on demand by
# scripts/gpu_check.sh, not part of `all`.
$(BUILD)/train_bench: $(call obj,scripts/gpu_check/train_bench.c) $(LIBNN) $(LIBHVD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIBNN) $(LIBHVD) $(LDLIBS) -o $@

# Rewrites the binary seeds of tests/fuzz/corpus/ with the project's writers.
$(BUILD)/fuzz-seeds/make_seeds: $(call obj,tests/fuzz/make_seeds.c) $(LIBTRAIN) $(LIBNN) $(LIBHVD) $(LIBUTIL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

fuzz-seeds: $(BUILD)/fuzz-seeds/make_seeds
	mkdir -p $(addprefix tests/fuzz/corpus/,fuzz_idx fuzz_checkpoint fuzz_safetensors)
	$< tests/fuzz/corpus

# Builds the libFuzzer harnesses with clang (ASan + UBSan) in $(FUZZ_BUILD) and runs each
# for FUZZ_SECONDS on a copy of its seeds (tests/fuzz/corpus/NAME), two at a time.
fuzz:
	$(MAKE) FUZZ=1 CC=clang CUDA=0 SANITIZE=address,undefined BUILD=$(FUZZ_BUILD) fuzzers
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

deps:
	@scripts/install-deps.sh

# Under SANITIZE=thread only the runtime's tests run (hvd/, collectives/: the threads are
# theirs); nn's compute threads and the programs' tests are for the other builds.
TEST_FILTER ?= $(if $(filter thread,$(SAN_LIST)),^test_(hvd_|coll_|grad_buckets))
# What `make test` builds first: everything, except under TSan, where only the libraries
# and the test programs of the runtime are built (the tests the filter above runs need no
# other program; it saves the TSan build of train, serve, the benches and the fuzz
# replays, a minute of the CI's 2 cores).
TEST_BUILD ?= $(if $(filter thread,$(SAN_LIST)),$(LIBNN) $(LIBHVD) $(LIBUTIL) $(LIBTRAIN) \
  $(BUILD)/hvd.pc $(filter $(BUILD)/tests/test_hvd_% $(BUILD)/tests/test_coll_% \
  $(BUILD)/tests/test_grad_buckets%,$(TESTS)),all)
# Under any sanitizer, these tests are not run again, each the same work as in the plain
# `make test` for a minute or more of the CI budget: two build and check programs of their
# own without the sanitizer (scripts/gpu_check.sh's nvcc build, and its plan and log
# readers on stand-in programs, which run make itself) or re-run other tests
# against mutated sources (scripts/mutation_check.sh); test_slurm_cluster.sh checks the
# SLURM daemons' integration (its C parts, the host-list parser and hvd's launch check,
# have tests of their own that do run); test_nn_precision_emulation emulates half
# precision over the CPU walk that the nn tests run under the sanitizer already;
# test_install.sh checks the shared libraries and `make install`, which a sanitizer
# build does not make; test_elastic_netns.sh trains twice on simulated hosts to check
# hvdrun's restart and train's resume, and test_netns_liveness.sh cuts a link between
# simulated hosts: the runtime code both run is what test_hvd_liveness and the train
# tests run under the sanitizer already. test_coll_bench.sh and test_cnn_bench_format.sh
# check the two benchmarks' output formats (40-50 s each under ASan): their flag parsers
# run under ASan + UBSan in the fuzz step (fuzz_allreduce_bench_flags,
# fuzz_cnn_bench_flags), the runtime calls they make in test_hvd_allreduce, and
# cnn_bench's training step in test_cnn_bench_accuracy and the train tests. test_python.sh and
# test_python_mnist.sh load the shared libhvd of a plain build into python3 (an
# instrumented one would need the sanitizer's runtime loaded before python's own code);
# the runtime calls they make run under the sanitizers in the test_hvd_* tests.
# test_train_torch_models.sh holds train's exports of every model to PyTorch's
# state_dicts (python3 and torch most of its time, 11 s under ASan): the C it runs (train
# --epochs 0 --export) runs under the sanitizers in test_train_export.sh and
# test_nn_models.
TEST_EXCLUDE ?= $(if $(SANITIZE),^(test_(gpu_check_build|gpu_check_plan|mutation_check|slurm_cluster|install|elastic_netns|netns_liveness|coll_bench|cnn_bench_format|python|python_mnist|train_torch_models)\.sh|test_nn_precision_emulation)$$)
# HVD_TEST_SANITIZER (the SANITIZE list, empty otherwise) lets a test scale its work down
# under a sanitizer (requests, epochs, samples), where it checks memory errors, not
# figures. tests/run.sh runs the tests it names as independent two at a time
# (HVD_TEST_JOBS=1: one at a time).

test: deps
	$(MAKE) $(TEST_BUILD)
	HVD_TEST_EXCLUDE='$(TEST_EXCLUDE)' HVD_TEST_SANITIZER='$(SANITIZE)' tests/run.sh $(BUILD) '$(TEST_FILTER)'

run: deps
	$(MAKE) all
	scripts/run-main.sh $(BUILD)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
