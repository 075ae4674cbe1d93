# volmig — the two commands a newcomer needs are `make demo` and `make test`.
# Each installs what it needs (apt packages, tools) idempotently. Fragments in mk/ add
# the test components (vCenter simulator, helm, ...).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath .)
TARGET_DIR ?= $(ROOT)/target
export CARGO_TERM_COLOR ?= never

include $(sort $(wildcard mk/*.mk))

.PHONY: help
help:
	@echo "make demo   - run volmig locally on the embedded test components"
	@echo "make test   - install what is needed, then fmt check, clippy, and the whole test suite"
	@echo "make bench  - benchmarks (results in bench/)"
	@echo "make install - release build into \$$PREFIX/bin (default /usr/local), with kubectl-volmig"

# Debian packages the tests use: Go + govmomi for the vCenter simulator, promtool.
APT_PACKAGES := golang-go golang-github-vmware-govmomi-dev prometheus
.PHONY: deps
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@command -v kubectl >/dev/null || { echo "kubectl is required on PATH"; exit 1; }
	@command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest

.PHONY: fmt-check
fmt-check:
	cargo fmt --all -- --check

.PHONY: clippy
clippy:
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: build
build:
	cargo build --workspace --all-targets

.PHONY: test
test: deps test-components fmt-check clippy build
	cargo nextest run --workspace --no-fail-fast

# Test components every end-to-end test needs; fragments in mk/ add their targets here.
.PHONY: test-components
test-components:

# Regenerates the CRD from the Rust types; the chart ships the same file (tests check both).
.PHONY: crd
crd:
	cargo run -q --bin volmig -- crd > crds/volumemigrations.yaml
	cp crds/volumemigrations.yaml charts/volmig/crds/volumemigrations.yaml
	cargo run -q --bin volmig -- crd --driver > charts/volmig/files/cnsvspherevolumemigrations.yaml
