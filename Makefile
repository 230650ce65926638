# The two-command quickstart: `make serve` and `make test`. Each target installs what is
# missing (scripts/install-deps.sh, idempotent) and builds first.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_BUILD ?= build-fuzz
FUZZ_RUNS ?= 10000000
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: all deps build test test-asan test-tsan serve bench fuzz format lint clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The GoogleTest suite and the live-server tests under ASan+UBSan / TSan, in build-asan/ and
# build-tsan/ (scripts/test-sanitizer.sh); any sanitizer report fails the run.
test-asan: deps
	./scripts/test-sanitizer.sh asan $(JOBS)

test-tsan: deps
	./scripts/test-sanitizer.sh tsan $(JOBS)

serve: build
	./scripts/serve-default.sh $(BUILD)/mla $(HOST) $(PORT)

bench: build
	$(BUILD)/bench/mla_bench --benchmark_counters_tabular=true

fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DMLA_FUZZ=ON -DMLA_SANITIZE=ON \
	  -DMLA_BUILD_TESTS=OFF -DMLA_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	./scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_RUNS)

# Formats every tracked C++ file in place (.clang-format).
format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

# clang-format check, clang-tidy on src/ (.clang-tidy), ruff on Python (scripts/lint.sh).
lint: deps $(BUILD)/build.ninja
	./scripts/lint.sh $(BUILD) $(JOBS)

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) build-asan build-tsan
