# The two quick-start commands: `make demo` and `make test`. Everything else is CMake.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build demo test bench bench-torch clean sanitize install

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: profile the quickstart MLP on Fashion-MNIST (seconds): breakdown, top ops,
# out/quickstart/{profile.db,trace.json,summary.json}.
demo: build
	./$(BUILD)/mstune profile workloads/jobs/quickstart.yaml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# bin/mstune, man1/mstune.1, the bash completion, the runtime library + headers + mstune-runtime.pc.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

bench: build
	./$(BUILD)/bench_core
	./$(BUILD)/bench_train
	./$(BUILD)/bench_graph
	./$(BUILD)/bench_amp
	./$(BUILD)/bench_amp_kernels
	./$(BUILD)/bench_onednn
	bash bench/profiler_overhead.sh

# PyTorch side by side (installs Debian's python3-torch for itself; not part of make test).
bench-torch: build
	bash bench/torch_compare.sh $(BUILD) 2

# Same tests under AddressSanitizer + UBSan, in its own build folder.
sanitize: setup
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMSTUNE_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-noprof
