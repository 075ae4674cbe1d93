# `make demo`: the whole system locally (see scripts/demo.sh).
.PHONY: demo
demo: deps vcsim
	cargo build --bin volmig --bin kube-testserver
	scripts/demo.sh
