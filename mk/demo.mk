# `make demo`: the whole system locally (see scripts/demo.sh). Builds the workspace's
# binaries with the same feature set as `make test`, so neither rebuilds the other's work.
.PHONY: demo
demo: deps vcsim
	cargo build --workspace --bins
	scripts/demo.sh
