# moe8 — top-level driver around CMake.
#   make deps   install Debian packages and the npm tokenizer (idempotent)
#   make        release build in build/
#   make check  the quick loop: the release build and its tests but those
#               labelled client (node SDK clients, Codex CLI, Claude Code, the
#               browser: test_serve*_clients) or slow (the servers' end-to-end
#               tests, the other long ones: CMakeLists.txt lists them); no
#               sanitizers, no fuzzing. make test runs them all
#   make test   deps + every release test + the ASan/UBSan tests (label asan:
#               the numeric-heavy ones run in release alone) + short fuzz runs, each
#               stage's build beside the tests before it (scripts/test.sh; both
#               fetch the npm half of deps beside the release build)
#   make demo   the main job on a built-in model
#   make install PREFIX=/usr/local   libmoe8.a, moe8.h and pkg-config files
#               (libmoe8_mpi.a and moe8-mpi.pc too when MPI was found)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# ctest's processor budget: each test declares what it uses (CMakeLists.txt);
# twice the cores, since most tests wait much of their time (servers, clients,
# mpirun's start): release tests 228 s at 3, 173 s at 4, 164 s at 5 on 2 cores
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
CMAKE_Q = cmake -Wno-dev
FUZZ_SECONDS ?= 10
PREFIX ?= /usr/local

# What the builds run first; scripts/test.sh passes DEPS= (it runs deps itself).
DEPS ?= deps

.PHONY: all deps build build-asan build-fuzz check test test-release test-asan test-fuzz demo install clean

all: build

deps:
	@./scripts/deps.sh

build: $(DEPS)
	@$(CMAKE_Q) -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j$(JOBS)

build-asan: $(DEPS)
	@$(CMAKE_Q) -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMOE8_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan -j$(JOBS)

build-fuzz: $(DEPS)
	@CC=clang $(CMAKE_Q) -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOE8_FUZZ=ON -DMOE8_MPI=OFF -DMOE8_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	@cmake --build build-fuzz -j$(JOBS)

test-release: build
	@cd build && ctest --output-on-failure -j$(TEST_JOBS)

test-asan: build-asan
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j$(TEST_JOBS) -L asan

test-fuzz: build-fuzz
	@cd build-fuzz && ctest --output-on-failure -j$(TEST_JOBS)

# the release stage of scripts/test.sh, without the tests labelled client or slow
check:
	@JOBS=$(JOBS) TEST_JOBS=$(TEST_JOBS) ./scripts/test.sh release

# the three stages, each next build beside the tests before it (scripts/test.sh)
test:
	@JOBS=$(JOBS) TEST_JOBS=$(TEST_JOBS) FUZZ_SECONDS=$(FUZZ_SECONDS) ./scripts/test.sh

demo: build
	@./scripts/demo.sh

install: build
	@cmake --install build --prefix "$(PREFIX)"

clean:
	rm -rf build build-asan build-fuzz build-asan.log build-fuzz.log
