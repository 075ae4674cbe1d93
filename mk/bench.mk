# `make bench`: the benchmarks of bench/ (docs/performance.md) on release builds of volmig and of
# the harness, against the vCenter simulator and the Kubernetes API test server. Writes
# bench/results.json, bench/report.md, bench/throughput.png and bench/memory.png.
#
#   make bench                     # default sizes, ~20 minutes on 2 cores
#   make bench BENCH_SCALE=large   # registration throughput with 10,000 vmdks
#   make bench BENCH_RUNS=1        # one run per figure instead of 3 (quick look)
#
# Not part of `make test`; the smoke run (tiny sizes) is the test bench/tests/smoke.rs,
# which `cargo nextest run --workspace` runs. The charts need a TrueType font: Debian's
# fonts-dejavu-core, installed here (and for the smoke test through test-components).

BENCH_SCALE ?= default
BENCH_RUNS ?=
BENCH_OUT ?= $(ROOT)/bench
BENCH_APT_PACKAGES := fonts-dejavu-core
BENCH_SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
BENCH_CARGO_ARGS := build --release --locked -p volmig --bin volmig -p volmig-bench --bin volmig-bench

.PHONY: bench bench-deps

bench-deps:
	@missing=""; for p in $(BENCH_APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(BENCH_SUDO) apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $(BENCH_SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

test-components: bench-deps

bench: bench-deps vcsim
	cargo $(BENCH_CARGO_ARGS)
	$(TARGET_DIR)/release/volmig-bench --scale $(BENCH_SCALE) \
	  $(if $(BENCH_RUNS),--runs $(BENCH_RUNS)) \
	  --volmig $(TARGET_DIR)/release/volmig --vcsim $(VCSIM_BIN) \
	  --out $(BENCH_OUT) --logs $(TARGET_DIR)/bench-logs
