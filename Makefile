# anvil: the two set-up commands are `make demo` and `make check`.
# Both install missing Debian packages first (scripts/deps.sh).

JOBS ?= 2

.PHONY: all deps build release asan demo check unit integration format clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake --preset debug >/dev/null
	@cmake --build build/debug -j$(JOBS)

release: deps
	@cmake --preset release >/dev/null
	@cmake --build build/release -j$(JOBS)

asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build build/asan -j$(JOBS)

# Starts a local cluster (anvil up), runs a real workload, stops it, exits 0.
demo: release
	@bash examples/demo.sh build/release/anvil

# Sanitizer build, every unit and integration test through ctest.
check: asan
	@bash scripts/format-check.sh
	@bash scripts/tidy.sh build/asan
	@cd build/asan && ctest --output-on-failure -j$(JOBS)

unit: asan
	@cd build/asan && ctest --output-on-failure -j$(JOBS) -L unit

integration: asan
	@cd build/asan && ctest --output-on-failure -j$(JOBS) -L integration

format:
	@clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c' 'tests/*.h')

clean:
	rm -rf build
