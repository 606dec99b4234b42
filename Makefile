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
