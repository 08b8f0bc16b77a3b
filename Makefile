# hvd: one build. Outputs go only under build/.
#   make            build libraries, programs and tests
#   make test       install missing packages, build, run every test
#   make run        install missing packages, build, train lenet on Fashion-MNIST on 2 ranks
#   make clean
# Layout of outputs:
#   build/libnn.a             nn/*.c
#   build/libhvd.a            hvd/*.c + collectives/*.c
#   build/hvd.pc              pkg-config file for user programs
#   build/train               examples/train.c + examples/train_*.c
#   build/examples/NAME       examples/NAME.c (other examples)
#   build/NAME                bench/NAME.c (one program per file)
#   build/hvdrun              launcher/*.c
#   build/tests/test_NAME     tests/test_NAME.c

BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
# Portable baseline: no -march=native. Hot loops pick AVX2/FMA at run time
# (__attribute__((target)) + __builtin_cpu_supports) where it pays.
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -Wall -Wextra -D_GNU_SOURCE -pthread -I. -MMD -MP

# MPI: take the compile and link flags from the MPI compiler wrapper
# (OpenMPI: --showme; MPICH: -compile_info/-link_info), so plain cc builds.
MPICC        ?= mpicc
MPI_CFLAGS   := $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -compile_info 2>/dev/null | cut -d' ' -f2-)
MPI_LDFLAGS  := $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -link_info 2>/dev/null | cut -d' ' -f2-)
BLAS_CFLAGS  := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LDFLAGS := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
HWLOC_LDFLAGS := $(shell pkg-config --libs hwloc 2>/dev/null || echo -lhwloc)

CFLAGS  += $(MPI_CFLAGS) $(BLAS_CFLAGS)
LDLIBS  := $(MPI_LDFLAGS) $(BLAS_LDFLAGS) $(HWLOC_LDFLAGS) -lz -lm -lpthread

NN_SRC    := $(wildcard nn/*.c)
HVD_SRC   := $(wildcard hvd/*.c) $(wildcard collectives/*.c)
TEST_SRC  := $(wildcard tests/test_*.c)
TEST_LIB_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
BENCH_SRC := $(wildcard bench/*.c)
TRAIN_SRC := $(wildcard examples/train.c examples/train_*.c)
EX_SRC    := $(filter-out $(TRAIN_SRC),$(wildcard examples/*.c))
LAUNCH_SRC := $(wildcard launcher/*.c)

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
CUDA_HDRS := $(and $(wildcard $(CUDA_HOME)/include/cudnn.h),$(wildcard $(CUDA_HOME)/include/nccl.h),$(wildcard $(CUDA_HOME)/include/cublas_v2.h))
ifeq ($(CUDA),1)
  ifneq ($(NVCC_OK),1)
    $(error CUDA=1 but no nvcc: '$(NVCC)' is not an executable, and none was found in PATH or $(CUDA_HOME)/bin (set CUDA_HOME or NVCC))
  endif
  ifeq ($(CUDA_HDRS),)
    $(error CUDA=1 but cudnn.h, nccl.h or cublas_v2.h is missing under $(CUDA_HOME)/include)
  endif
  USE_CUDA := 1
else ifeq ($(CUDA),auto)
  USE_CUDA := $(if $(and $(NVCC_OK),$(CUDA_HDRS)),1)
endif
ifeq ($(USE_CUDA),1)
  CUDA_DEFS    := -DHVD_WITH_CUDA=1 -DHVD_WITH_CUDNN=1 -DHVD_WITH_CUBLAS=1 -DHVD_WITH_NCCL=1
  CUDA_ARCH    ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
                  -gencode arch=compute_90,code=compute_90
  NVCCFLAGS    ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra
  NVCCFLAGS    += -I. $(CUDA_DEFS) -MMD -MP
  CFLAGS       += $(CUDA_DEFS) -I$(CUDA_HOME)/include
  CUDA_LIBDIR  := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
  LDLIBS       += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudnn -lcublas -lcublasLt \
                  -lnccl -lcudart_static -ldl -lrt -lstdc++
  NN_SRC       += $(wildcard nn/cuda/*.c)
  NN_CU_SRC    := $(wildcard nn/cuda/*.cu)
  HVD_CU_SRC   := $(wildcard hvd/*.cu)
endif

CONFIG_STAMP := $(BUILD)/config.cuda
$(shell mkdir -p $(BUILD) && (echo 'USE_CUDA=$(USE_CUDA)' | cmp -s - $(CONFIG_STAMP) || echo 'USE_CUDA=$(USE_CUDA)' > $(CONFIG_STAMP)))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cuobj = $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(1))

LIBNN  := $(BUILD)/libnn.a
LIBHVD := $(BUILD)/libhvd.a
TESTS  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst bench/%.c,$(BUILD)/%,$(BENCH_SRC))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_SRC))
TRAIN  := $(if $(wildcard examples/train.c),$(BUILD)/train)
HVDRUN := $(if $(LAUNCH_SRC),$(BUILD)/hvdrun)

.PHONY: all test run deps clean
all: $(LIBNN) $(LIBHVD) $(BUILD)/hvd.pc $(TESTS) $(BENCHES) $(EXAMPLES) $(TRAIN) $(HVDRUN)

$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIBNN): $(call obj,$(NN_SRC)) $(call cuobj,$(NN_CU_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBHVD): $(call obj,$(HVD_SRC)) $(call cuobj,$(HVD_CU_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/hvd.pc: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' \
	  'prefix=$(abspath $(BUILD))' \
	  'srcdir=$(abspath .)' \
	  'Name: hvd' \
	  'Description: data-parallel training runtime (allreduce over MPI)' \
	  'Version: 0.1' \
	  'Cflags: -I$${srcdir}/hvd -I$${srcdir} $(MPI_CFLAGS)' \
	  'Libs: -L$${prefix} -lhvd $(LDLIBS)' > $@

$(BUILD)/tests/%: $(call obj,tests/%.c $(TEST_LIB_SRC)) $(LIBNN) $(LIBHVD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(filter %.o,$^) $(LIBNN) $(LIBHVD) $(LDLIBS) -o $@

$(BUILD)/%: $(call obj,bench/%.c) $(LIBNN) $(LIBHVD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIBNN) $(LIBHVD) $(LDLIBS) -o $@

$(BUILD)/examples/%: $(call obj,examples/%.c) $(LIBNN) $(LIBHVD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIBNN) $(LIBHVD) $(LDLIBS) -o $@

$(BUILD)/train: $(call obj,$(TRAIN_SRC)) $(LIBNN) $(LIBHVD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(filter %.o,$^) $(LIBNN) $(LIBHVD) $(LDLIBS) -o $@

$(BUILD)/hvdrun: $(call obj,$(LAUNCH_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ $(HWLOC_LDFLAGS) -o $@

deps:
	@scripts/install-deps.sh

test: deps
	$(MAKE) all
	tests/run.sh $(BUILD)

run: deps
	$(MAKE) all
	scripts/run-main.sh $(BUILD)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
