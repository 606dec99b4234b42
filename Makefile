# trainmem's everyday commands. `make test` is the README's test command and
# what CI runs. Add a target by adding a block; keep each a plain command.

GO        ?= go
PKGS      ?= ./...
RUN_ARGS  ?= train
BENCH     ?= .
BENCHTIME ?= 1s

.PHONY: all run test vet fmt-check bench build

all: vet fmt-check test

# The main job: `make run RUN_ARGS="fit --preset gpt2 --memory 24GB"` for another.
run:
	$(GO) run ./cmd/trainmem $(RUN_ARGS)

# The in-process ranks run as goroutines: their package is tested under
# the race detector too.
test:
	$(GO) test $(PKGS)
	$(GO) test -race ./zero

vet:
	$(GO) vet $(PKGS)

# Lists the files gofmt would change and fails if there are any.
fmt-check:
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$out"; exit 1; fi

# Go benchmarks only (no tests): `make bench BENCH=Estimate PKGS=./model`.
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(PKGS)

# The command with its web page inside (trainmem web serves it): the page's
# WebAssembly is built first (scripts/web.sh, into bin/web as make web).
build:
	GO=$(GO) scripts/web.sh bin/web bin/trainmem

# The web page (docs/guide.md, "The web page"): bin/web, a static site any
# static host serves (or trainmem web --dir bin/web); trainmem itself
# compiled to WebAssembly runs in it.
.PHONY: web
web:
	GO=$(GO) scripts/web.sh bin/web

# ---- MPI (docs/architecture.md, "Ranks over processes"): bin/trainmem-mpi,
# cgo against Open MPI (Debian: libopenmpi-dev, openmpi-bin), for
# `mpirun -np N bin/trainmem-mpi validate ...`. The default build needs no MPI.
MPI_ENV := CGO_ENABLED=1

.PHONY: build-mpi test-mpi
build-mpi:
	$(MPI_ENV) $(GO) build -tags trainmem_mpi -o bin/trainmem-mpi ./cmd/trainmem

# The ranks over MPI against the in-process ranks and the simulation, every
# stage, 4 processes by mpirun on this machine's loopback.
test-mpi: build-mpi
	TRAINMEM_MPI_BIN=$(CURDIR)/bin/trainmem-mpi $(MPI_ENV) $(GO) test -tags trainmem_mpi -count=1 -run 'TestMPI' ./cmd/trainmem
	$(MPI_ENV) $(GO) test -tags trainmem_mpi -count=1 -run 'TestMPI' ./zero

# ---- CUDA (docs/architecture.md, "The CUDA device"; docs/guide.md, "CUDA").
# The build kit comes from scripts/install-cuda-kit.sh (into .cudakit, no
# GPU needed). The cuda build of trainmem starts on any machine; --device
# cuda needs an NVIDIA driver and GPU at run time.
CUDAKIT    ?= $(CURDIR)/.cudakit
NVCC       ?= $(CUDAKIT)/bin/nvcc
PTXAS      ?= $(CUDAKIT)/bin/ptxas
NVCC_CCBIN ?= g++-11
PTX_ARCHS  := 80 90
PTX        := $(foreach a,$(PTX_ARCHS),cuda/gpu/kernels/kernels_sm$(a).ptx)
# The driver API is resolved at run time (cuda/gpu/shim.c): --as-needed
# drops the link-time libcuda stub, so the binary needs no libcuda.so.1 to start.
CUDA_ENV   := CGO_ENABLED=1 CGO_CFLAGS="-I$(CUDAKIT)/usr/include" \
	CGO_LDFLAGS="-Wl,--as-needed -L$(CUDAKIT)/usr/lib/x86_64-linux-gnu/stubs"
# Every package with tests that only the cuda build has.
CUDA_TEST_PKGS := ./cuda/gpu ./cmd/trainmem ./zero
BUNDLE     := bin/gpu-bundle

.PHONY: cuda-kit ptx ptx-check build-cuda vet-cuda test-cuda-build test-cuda-nogpu test-cuda-emu emu gpu-check-emu cuda-check gpu-bundle

cuda-kit:
	scripts/install-cuda-kit.sh >/dev/null

# Regenerates the embedded PTX from cuda/gpu/kernels/kernels.cu (commit the
# result). nvcc's PTX has no paths or dates: the same source gives the same bytes.
ptx:
	@for a in $(PTX_ARCHS); do \
		echo "nvcc -ptx -arch=compute_$$a cuda/gpu/kernels/kernels.cu -> cuda/gpu/kernels/kernels_sm$$a.ptx"; \
		$(NVCC) -ccbin $(NVCC_CCBIN) -ptx -arch=compute_$$a -o cuda/gpu/kernels/kernels_sm$$a.ptx cuda/gpu/kernels/kernels.cu || exit 1; \
	done

# The embedded PTX equals a fresh build byte for byte and assembles for
# sm_80 and sm_90.
ptx-check:
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for a in $(PTX_ARCHS); do \
		$(NVCC) -ccbin $(NVCC_CCBIN) -ptx -arch=compute_$$a -o $$tmp/k$$a.ptx cuda/gpu/kernels/kernels.cu || exit 1; \
		cmp $$tmp/k$$a.ptx cuda/gpu/kernels/kernels_sm$$a.ptx || { echo "cuda/gpu/kernels/kernels_sm$$a.ptx is stale: run make ptx"; exit 1; }; \
		$(PTXAS) -arch=sm_$$a -o /dev/null cuda/gpu/kernels/kernels_sm$$a.ptx || exit 1; \
		echo "ptx: kernels_sm$$a.ptx is fresh and passes ptxas -arch=sm_$$a"; \
	done
	@log=$$(mktemp); (cd cuda/gpu && PTXAS=$(PTXAS) $(CUDA_ENV) $(GO) test -tags trainmem_cuda -count=1 -run TestRegisterBudget -v .) >$$log 2>&1; rc=$$?; \
	grep -E 'budget|registers|FAIL' $$log | sed 's/^ *calls_test.go:[0-9]*: /ptx: /'; rm -f $$log; exit $$rc

build-cuda:
	$(CUDA_ENV) $(GO) build -tags trainmem_cuda -o bin/trainmem-cuda ./cmd/trainmem

vet-cuda:
	$(CUDA_ENV) $(GO) vet -tags trainmem_cuda $(PKGS)

# Compiles (does not run) the test binaries with CUDA tests into bin/cuda-tests.
test-cuda-build:
	@mkdir -p bin/cuda-tests
	@for p in $(CUDA_TEST_PKGS); do \
		n=$$(basename $$p); echo "go test -tags trainmem_cuda -c $$p -> bin/cuda-tests/$$n.test"; \
		$(CUDA_ENV) $(GO) test -tags trainmem_cuda -c -o bin/cuda-tests/$$n.test $$p || exit 1; \
	done

# Runs the CUDA test binary where there is no GPU: the GPU tests skip with
# their reason, the rest (the driver shim, kernel tables, host conformance)
# run; then again over a fake libcuda.so.1 (cuda/gpu/testdata/fakecuda.c) that
# answers through the shim's trampolines.
test-cuda-nogpu: test-cuda-build
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	gcc -shared -fPIC -o $$tmp/libcuda.so.1 cuda/gpu/testdata/fakecuda.c || exit 1; \
	for fake in 0 1; do \
		if [ $$fake = 1 ]; then echo "== over a fake libcuda.so.1 (no device)"; lib=$$tmp; else echo "== without libcuda.so.1"; lib=; fi; \
		(cd cuda/gpu && LD_LIBRARY_PATH=$$lib TRAINMEM_FAKE_LIBCUDA=$$fake ../../bin/cuda-tests/gpu.test -test.v) >$$tmp/log 2>&1; rc=$$?; \
		grep -E '^(--- (FAIL|SKIP)|FAIL|ok|PASS)|skipped' $$tmp/log; \
		echo "$$(grep -c '^--- PASS' $$tmp/log) passed, $$(grep -c '^--- FAIL' $$tmp/log) failed, $$(grep -c '^--- SKIP' $$tmp/log) skipped"; \
		[ $$rc = 0 ] || { tail -40 $$tmp/log; exit $$rc; }; \
	done

# ---- The emulated GPU (docs/architecture.md, "The emulated GPU"): a fake
# libcuda.so.1 whose kernels are kernels.cu compiled as host C++ under
# cuda/gpu/emu/cuda_emu.h (every CUDA thread a fiber), and a fake cuBLAS, so
# that the real CUDA device runs on the CPU.
EMU       := bin/emu
EMU_CXX   ?= $(NVCC_CCBIN)
EMU_FLAGS := -std=c++17 -O2 -fPIC -Wall -Wno-unknown-pragmas -I$(CUDAKIT)/usr/include -Icuda/gpu/emu -I$(EMU)
EMU_HDRS  := cuda/gpu/emu/cuda_emu.h cuda/gpu/emu/emu_table.h

$(EMU):
	mkdir -p $@

# The PTX's entry points, which the emulator must compile.
$(EMU)/emu_entries.inc: cuda/gpu/kernels/kernels_sm80.ptx | $(EMU)
	grep -oE '^\.visible \.entry [A-Za-z0-9_]+' $< | sed 's/.* /EMU_ENTRY(/; s/$$/)/' > $@

$(EMU)/emu_kernels.o: cuda/gpu/emu/emu_kernels.cpp cuda/gpu/kernels/kernels.cu $(wildcard cuda/gpu/kernels/*.cuh) $(EMU_HDRS) $(EMU)/emu_entries.inc
	$(EMU_CXX) $(EMU_FLAGS) -c $< -o $@

# The kernels' __shared__ arrays (their function-local statics, _ZZ...),
# poisoned at each block's start: listed from the object with their sizes.
$(EMU)/emu_shared.cpp: $(EMU)/emu_kernels.o
	nm -S --defined-only $< | awk '$$4 ~ /^_ZZ/ { n[++k] = $$4; s[k] = $$2 } END { \
		print "#include \"emu_table.h\""; print "extern \"C\" {"; for (i = 1; i <= k; i++) print "extern char " n[i] "[];"; \
		print "const emu_region emu_shared_regions[] = {"; for (i = 1; i <= k; i++) print "\t{" n[i] ", 0x" s[i] "},"; \
		print "};"; print "const int emu_shared_count = " k ";"; print "}" }' > $@

$(EMU)/emu_shared.o: $(EMU)/emu_shared.cpp $(EMU_HDRS)
	$(EMU_CXX) $(EMU_FLAGS) -c $< -o $@

$(EMU)/fakecuda.o: cuda/gpu/emu/fakecuda.cpp $(EMU_HDRS) | $(EMU)
	$(EMU_CXX) $(EMU_FLAGS) -c $< -o $@

$(EMU)/libcuda.so.1: $(EMU)/fakecuda.o $(EMU)/emu_kernels.o $(EMU)/emu_shared.o
	$(EMU_CXX) -shared -Wl,--no-undefined -o $@ $^ -ldl

# Two majors, so that the fallback from one whose cublasCreate fails is run.
$(EMU)/libcublas.so.%: cuda/gpu/emu/fakecublas.cpp $(EMU)/libcuda.so.1
	$(EMU_CXX) $(EMU_FLAGS) -shared -Wl,--no-undefined -o $@ $< -L$(EMU) -l:libcuda.so.1 -ldl

# The emulated NCCL (ranks of one process), for --backend nccl on emulated GPUs.
$(EMU)/libnccl.so.2: cuda/gpu/emu/fakenccl.cpp $(EMU)/libcuda.so.1
	$(EMU_CXX) $(EMU_FLAGS) -shared -Wl,--no-undefined -o $@ $< -L$(EMU) -l:libcuda.so.1 -ldl -lpthread

emu: $(EMU)/libcuda.so.1 $(EMU)/libcublas.so.13 $(EMU)/libcublas.so.12 $(EMU)/libnccl.so.2

# The emulator checked with kernels of its own (cuda/gpu/emu/selftest.cpp).
$(EMU)/selftest: cuda/gpu/emu/selftest.cpp cuda/gpu/emu/fakecublas.cpp $(EMU)/fakecuda.o $(EMU_HDRS)
	$(EMU_CXX) $(EMU_FLAGS) -o $@ cuda/gpu/emu/selftest.cpp cuda/gpu/emu/fakecublas.cpp $(EMU)/fakecuda.o -ldl -lpthread

# The CUDA path executed without a GPU: the conformance suite and the
# device tests (NCCL's on two emulated GPUs) on the emulated GPU under two schedules of a block's threads
# (forward and reverse: a missing barrier shows as a difference), broken
# copies of the kernel families (kernels/*.cuh) that must fail it (scripts/emu-mutants.sh), and
# train and validate --device cuda against the host (TestCUDAMatchesHost).
test-cuda-emu: test-cuda-build emu $(EMU)/selftest
	@for s in forward reverse; do echo "== emulator self-test, schedule $$s"; \
		out=$$(TRAINMEM_EMU_SCHEDULE=$$s $(EMU)/selftest 2>/dev/null); rc=$$?; \
		echo "$$out" | grep -v '^ok'; [ $$rc = 0 ] || exit 1; \
	done
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for s in forward reverse; do \
		echo "== emulated GPU, schedule $$s: conformance and device tests"; \
		(cd cuda/gpu && LD_LIBRARY_PATH=$(CURDIR)/$(EMU) TRAINMEM_EMU_SCHEDULE=$$s TRAINMEM_EMU_DEVICES=2 TRAINMEM_NCCL=$(CURDIR)/$(EMU)/libnccl.so.2 ../../bin/cuda-tests/gpu.test -test.v -test.skip 'TestCUBLASFallback|TestRegisterBudget') >$$tmp/log 2>&1; rc=$$?; \
		grep -E '^(--- FAIL|FAIL)|emulated GPU:' $$tmp/log | head -20; \
		p=$$(grep -c -- '--- PASS' $$tmp/log); f=$$(grep -c -- '--- FAIL' $$tmp/log); k=$$(grep -c -- '--- SKIP' $$tmp/log); \
		c=$$(grep -c -- '--- PASS: TestConformanceCUDA/' $$tmp/log); \
		echo "$$p passed ($$c of them CUDA conformance subtests), $$f failed, $$k skipped"; \
		[ $$rc = 0 ] && [ $$k = 0 ] || { tail -40 $$tmp/log; exit 1; }; \
	done; \
	for broken in 13 all; do \
		echo "== emulated GPU, cuBLAS $$broken broken: the fallback"; \
		(cd cuda/gpu && LD_LIBRARY_PATH=$(CURDIR)/$(EMU) TRAINMEM_EMU_CUBLAS_BROKEN=$$broken ../../bin/cuda-tests/gpu.test -test.v -test.run TestCUBLASFallback) >$$tmp/log 2>&1 || { tail -20 $$tmp/log; exit 1; }; \
		grep -E 'device_test\.go' $$tmp/log | sed 's/^ *//'; \
	done
	scripts/emu-mutants.sh $(EMU) "$(EMU_CXX) $(EMU_FLAGS)"
	@echo "== emulated GPU: train and validate --device cuda against the host"
	@(cd cmd/trainmem && LD_LIBRARY_PATH=$(CURDIR)/$(EMU) ../../bin/cuda-tests/trainmem.test -test.v -test.run TestCUDAMatchesHost) >$(EMU)/matches.log 2>&1; rc=$$?; \
	grep -E 'cuda_test.go|^(--- |ok|FAIL|PASS)' $(EMU)/matches.log | sed 's/^ *cuda_test.go:[0-9]*: /  /'; \
	if [ $$rc != 0 ] || grep -q -- '--- SKIP' $(EMU)/matches.log; then tail -40 $(EMU)/matches.log; exit 1; fi
	@echo "== 4 emulated GPUs: the ranks and layouts over the emulated NCCL against the simulation and the host ranks"
	@(cd cmd/trainmem && LD_LIBRARY_PATH=$(CURDIR)/$(EMU) TRAINMEM_EMU_DEVICES=4 TRAINMEM_NCCL=$(CURDIR)/$(EMU)/libnccl.so.2 ../../bin/cuda-tests/trainmem.test -test.v -test.run TestNCCLRanks) >$(EMU)/nccl.log 2>&1; rc=$$?; \
	grep -E 'cuda_test.go|^(--- |ok|FAIL|PASS)' $(EMU)/nccl.log | sed 's/^ *cuda_test.go:[0-9]*: /  /'; \
	if [ $$rc != 0 ] || grep -q -- '--- SKIP' $(EMU)/nccl.log; then tail -40 $(EMU)/nccl.log; exit 1; fi
	@echo "== 4 emulated GPUs: point-to-point and sub-communicators over the emulated NCCL (ncclSend, ncclRecv, a communicator a group)"
	@(cd zero && LD_LIBRARY_PATH=$(CURDIR)/$(EMU) TRAINMEM_EMU_DEVICES=4 TRAINMEM_NCCL=$(CURDIR)/$(EMU)/libnccl.so.2 ../bin/cuda-tests/zero.test -test.v -test.run 'TestNCCLSendRecv|TestNCCLSplit') >$(EMU)/p2p.log 2>&1; rc=$$?; \
	grep -E '^(--- |ok|FAIL|PASS)' $(EMU)/p2p.log; \
	if [ $$rc != 0 ] || grep -q -- '--- SKIP' $(EMU)/p2p.log; then tail -40 $(EMU)/p2p.log; exit 1; fi

# scripts/gpu-check.sh's quick pass on the emulated GPU, so that the script
# a GPU lease runs has run before (about two and a half minutes).
gpu-check-emu: gpu-bundle emu
	rm -rf $(EMU)/gpu-check
	LD_LIBRARY_PATH=$(CURDIR)/$(EMU) QUICK=1 $(BUNDLE)/gpu-check.sh $(EMU)/gpu-check

# What CI checks of the CUDA path on a machine without a GPU.
cuda-check: ptx-check vet-cuda build-cuda test-cuda-nogpu test-cuda-emu
	$(CUDA_ENV) $(GO) build -tags trainmem_cuda $(PKGS)
	@if readelf -d bin/trainmem-cuda | grep -q 'libcuda'; then \
		echo "bin/trainmem-cuda links libcuda.so.1: a driver symbol is missing from cuda/gpu/shim_syms.h"; exit 1; fi
	@echo "cuda-check: ok (bin/trainmem-cuda needs no libcuda.so.1 to start)"

# Everything a GPU machine without Go needs, in one folder: the cuda build
# of trainmem, the CUDA test binaries, the table maker and
# scripts/gpu-check.sh. The binaries need glibc 2.34 or newer there.
gpu-bundle: build-cuda test-cuda-build
	rm -rf $(BUNDLE) && mkdir -p $(BUNDLE)
	cp bin/trainmem-cuda $(BUNDLE)/trainmem
	cp bin/cuda-tests/gpu.test $(BUNDLE)/
	$(GO) build -o $(BUNDLE)/gpureport ./scripts/gpureport
	cp scripts/gpu-check.sh $(BUNDLE)/
	@du -sh $(BUNDLE); s=$$(du -sm $(BUNDLE) | cut -f1); \
	if [ $$s -ge 60 ]; then echo "gpu-bundle: $$s MiB, over the 60 MiB budget"; exit 1; fi
	@echo "gpu-bundle: copy $(BUNDLE) to the GPU machine and run: ./gpu-check.sh OUTDIR"
