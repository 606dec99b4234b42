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

test:
	$(GO) test $(PKGS)

vet:
	$(GO) vet $(PKGS)

# Lists the files gofmt would change and fails if there are any.
fmt-check:
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$out"; exit 1; fi

# Go benchmarks only (no tests): `make bench BENCH=Estimate PKGS=./model`.
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(PKGS)

build:
	$(GO) build -o bin/trainmem ./cmd/trainmem

# ---- CUDA (docs/architecture.md, "The CUDA device"; README, "CUDA").
# The build kit comes from scripts/install-cuda-kit.sh (into .cudakit, no
# GPU needed). The cuda build of trainmem starts on any machine; --device
# cuda needs an NVIDIA driver and GPU at run time.
CUDAKIT    ?= $(CURDIR)/.cudakit
NVCC       ?= $(CUDAKIT)/bin/nvcc
PTXAS      ?= $(CUDAKIT)/bin/ptxas
NVCC_CCBIN ?= g++-11
PTX_ARCHS  := 80 90
PTX        := $(foreach a,$(PTX_ARCHS),cuda/kernels/kernels_sm$(a).ptx)
# The driver API is resolved at run time (cuda/cuda_shim.c): --as-needed
# drops the link-time libcuda stub, so the binary needs no libcuda.so.1 to start.
CUDA_ENV   := CGO_ENABLED=1 CGO_CFLAGS="-I$(CUDAKIT)/usr/include" \
	CGO_LDFLAGS="-Wl,--as-needed -L$(CUDAKIT)/usr/lib/x86_64-linux-gnu/stubs"
# Every package with tests that only the cuda build has.
CUDA_TEST_PKGS := ./cuda
BUNDLE     := bin/gpu-bundle

.PHONY: cuda-kit ptx ptx-check build-cuda vet-cuda test-cuda-build test-cuda-nogpu cuda-check gpu-bundle

cuda-kit:
	scripts/install-cuda-kit.sh >/dev/null

# Regenerates the embedded PTX from cuda/kernels/kernels.cu (commit the
# result). nvcc's PTX has no paths or dates: the same source gives the same bytes.
ptx:
	@for a in $(PTX_ARCHS); do \
		echo "nvcc -ptx -arch=compute_$$a cuda/kernels/kernels.cu -> cuda/kernels/kernels_sm$$a.ptx"; \
		$(NVCC) -ccbin $(NVCC_CCBIN) -ptx -arch=compute_$$a -o cuda/kernels/kernels_sm$$a.ptx cuda/kernels/kernels.cu || exit 1; \
	done

# The embedded PTX equals a fresh build byte for byte and assembles for
# sm_80 and sm_90.
ptx-check:
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	for a in $(PTX_ARCHS); do \
		$(NVCC) -ccbin $(NVCC_CCBIN) -ptx -arch=compute_$$a -o $$tmp/k$$a.ptx cuda/kernels/kernels.cu || exit 1; \
		cmp $$tmp/k$$a.ptx cuda/kernels/kernels_sm$$a.ptx || { echo "cuda/kernels/kernels_sm$$a.ptx is stale: run make ptx"; exit 1; }; \
		$(PTXAS) -arch=sm_$$a -o /dev/null cuda/kernels/kernels_sm$$a.ptx || exit 1; \
		echo "ptx: kernels_sm$$a.ptx is fresh and passes ptxas -arch=sm_$$a"; \
	done

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
# run; then again over a fake libcuda.so.1 (cuda/testdata/fakecuda.c) that
# answers through the shim's trampolines.
test-cuda-nogpu: test-cuda-build
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	gcc -shared -fPIC -o $$tmp/libcuda.so.1 cuda/testdata/fakecuda.c || exit 1; \
	for fake in 0 1; do \
		if [ $$fake = 1 ]; then echo "== over a fake libcuda.so.1 (no device)"; lib=$$tmp; else echo "== without libcuda.so.1"; lib=; fi; \
		(cd cuda && LD_LIBRARY_PATH=$$lib TRAINMEM_FAKE_LIBCUDA=$$fake ../bin/cuda-tests/cuda.test -test.v) >$$tmp/log 2>&1; rc=$$?; \
		grep -E '^(--- (FAIL|SKIP)|FAIL|ok|PASS)|skipped' $$tmp/log; \
		echo "$$(grep -c '^--- PASS' $$tmp/log) passed, $$(grep -c '^--- FAIL' $$tmp/log) failed, $$(grep -c '^--- SKIP' $$tmp/log) skipped"; \
		[ $$rc = 0 ] || { tail -40 $$tmp/log; exit $$rc; }; \
	done

# What CI checks of the CUDA path on a machine without a GPU.
cuda-check: ptx-check vet-cuda build-cuda test-cuda-nogpu
	$(CUDA_ENV) $(GO) build -tags trainmem_cuda $(PKGS)
	@if readelf -d bin/trainmem-cuda | grep -q 'libcuda'; then \
		echo "bin/trainmem-cuda links libcuda.so.1: a driver symbol is missing from cuda/cuda_shim_syms.h"; exit 1; fi
	@echo "cuda-check: ok (bin/trainmem-cuda needs no libcuda.so.1 to start)"

# Everything a GPU machine without Go needs, in one folder: the cuda build
# of trainmem, the CUDA test binaries, the table maker and
# scripts/gpu-check.sh. The binaries need glibc 2.34 or newer there.
gpu-bundle: build-cuda test-cuda-build
	rm -rf $(BUNDLE) && mkdir -p $(BUNDLE)
	cp bin/trainmem-cuda $(BUNDLE)/trainmem
	cp bin/cuda-tests/*.test $(BUNDLE)/
	$(GO) build -o $(BUNDLE)/gpureport ./scripts/gpureport
	cp scripts/gpu-check.sh $(BUNDLE)/
	@du -sh $(BUNDLE); s=$$(du -sm $(BUNDLE) | cut -f1); \
	if [ $$s -ge 60 ]; then echo "gpu-bundle: $$s MiB, over the 60 MiB budget"; exit 1; fi
	@echo "gpu-bundle: copy $(BUNDLE) to the GPU machine and run: ./gpu-check.sh OUTDIR"
