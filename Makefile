# The two quick-start commands: `make demo` and `make test`. Everything else is CMake.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all setup build demo test bench bench-torch clean sanitize install fuzz fuzz-build

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

# A failing test is rerun once (a second failure fails the run): the few integration tests that
# check measured shares against injected costs (test_profile, test_gate, test_sampler) can miss on
# a machine whose other load preempts a step; a real defect fails both times.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --repeat until-pass:2

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

# Every test (unit and integration: they run build-asan's own mstune) under AddressSanitizer,
# UBSan and LeakSanitizer, in its own build folder. Debug -O1 keeps it within CI's time.
# intercept_tls_get_addr=0: LeakSanitizer (gcc 12) crashes scanning the dynamic TLS of the dlopen'd
# libdnnl/libgomp ("Tracer caught signal 11 ... DTLS"); without the interception it scans the rest.
SANITIZE_FLAGS ?= -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DMSTUNE_SANITIZE=ON
sanitize: setup
	cmake -S . -B build-asan $(SANITIZE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure --repeat until-pass:3 -j $(JOBS)

# libFuzzer harnesses (tests/fuzz/), clang + ASan/UBSan: each runs FUZZ_SECONDS from its seed
# corpus (tests/fuzz/corpus/NAME, read only; new inputs go to build-fuzz/corpus/NAME). A crash
# leaves its input in build-fuzz/ and fails the target.
FUZZ_SECONDS ?= 60
FUZZERS = fuzz_job fuzz_idx fuzz_checkpoint fuzz_reports fuzz_kernel_verdicts
fuzz-build: setup
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMSTUNE_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS) --target $(FUZZERS)
fuzz: fuzz-build
	@set -e; for f in $(FUZZERS); do \
	  mkdir -p build-fuzz/corpus/$$f; \
	  echo "== $$f: $(FUZZ_SECONDS) s"; \
	  cd build-fuzz; \
	  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    ./fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    corpus/$$f ../tests/fuzz/corpus/$$f > $$f.log 2>&1; then tail -n 60 $$f.log; exit 1; fi; \
	  grep -E "^stat::number_of_executed_units|^Done" $$f.log; cd ..; \
	done

clean:
	rm -rf $(BUILD) build-asan build-noprof build-fuzz
