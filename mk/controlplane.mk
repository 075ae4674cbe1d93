# A real Kubernetes control plane for the end-to-end suite (tests/support/controlplane/):
# kube-apiserver and etcd built from their published Go modules (k8s.io/kubernetes and
# go.etcd.io/etcd/server/v3, pinned in tests/support/controlplane/go.mod), and `certs`,
# which writes each test's CA, serving certificate and ServiceAccount key.
# Modules come from the Go module proxy into the user's module cache and builds use the
# user's build cache (GOMODCACHE, GOCACHE defaults), so another checkout on the same
# machine builds from warm caches. Binaries are rebuilt only when go.mod, go.sum, the
# sources or this file change. Tests find them in $(TARGET_DIR)/controlplane
# (or $$VOLMIG_CONTROL_PLANE_DIR).

CONTROLPLANE_SRC_DIR := tests/support/controlplane
CONTROLPLANE_DIR := $(TARGET_DIR)/controlplane
CONTROLPLANE_INPUTS := $(CONTROLPLANE_SRC_DIR)/go.mod $(CONTROLPLANE_SRC_DIR)/go.sum \
	$(wildcard $(CONTROLPLANE_SRC_DIR)/*.go $(CONTROLPLANE_SRC_DIR)/cmd/*/*.go) mk/controlplane.mk
# GOTOOLCHAIN=local: build with the installed Go, never fetch another toolchain.
CONTROLPLANE_GOENV := GO111MODULE=on GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0
CONTROLPLANE_BINS := $(CONTROLPLANE_DIR)/kube-apiserver $(CONTROLPLANE_DIR)/etcd \
	$(CONTROLPLANE_DIR)/certs

.PHONY: controlplane print-controlplane-dir controlplane-go
controlplane: $(CONTROLPLANE_BINS)

# The end-to-end tests need it (make merges this with the root prerequisites).
test-components: controlplane

print-controlplane-dir:
	@echo $(CONTROLPLANE_DIR)

# k8s.io/kubernetes v1.37 needs Go >= 1.26 (its go.mod); Debian's golang-go may be older
# and GOTOOLCHAIN=local never fetches another, so say so instead of failing in the build.
CONTROLPLANE_GO_MIN := $(shell sed -n 's/^go \([0-9.]*\)$$/\1/p' $(CONTROLPLANE_SRC_DIR)/go.mod)
controlplane-go:
	@have="$$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null | sed 's/^go//')"; \
	if [ -z "$$have" ] || [ "$$(printf '%s\n%s\n' "$(CONTROLPLANE_GO_MIN)" "$$have" | sort -V | head -1)" != "$(CONTROLPLANE_GO_MIN)" ]; then \
	  echo "make controlplane needs Go >= $(CONTROLPLANE_GO_MIN) first on PATH; found '$$(command -v go)' $${have:-none}" >&2; \
	  exit 1; \
	fi

# The version k8s's own build stamps (hack/lib/version.sh); a plain `go build` would
# report v0.0.0-master at /version.
CONTROLPLANE_K8S_VERSION := $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\)$$|\1|p' \
	$(CONTROLPLANE_SRC_DIR)/go.mod)
CONTROLPLANE_K8S_MINOR := $(word 2,$(subst ., ,$(CONTROLPLANE_K8S_VERSION)))
CONTROLPLANE_VERSION_PKG := k8s.io/component-base/version

$(CONTROLPLANE_DIR)/kube-apiserver: CONTROLPLANE_PKG := k8s.io/kubernetes/cmd/kube-apiserver
$(CONTROLPLANE_DIR)/kube-apiserver: CONTROLPLANE_LDFLAGS := \
	-X $(CONTROLPLANE_VERSION_PKG).gitVersion=$(CONTROLPLANE_K8S_VERSION) \
	-X $(CONTROLPLANE_VERSION_PKG).gitMajor=1 \
	-X $(CONTROLPLANE_VERSION_PKG).gitMinor=$(CONTROLPLANE_K8S_MINOR)
$(CONTROLPLANE_DIR)/etcd: CONTROLPLANE_PKG := go.etcd.io/etcd/server/v3
$(CONTROLPLANE_DIR)/certs: CONTROLPLANE_PKG := ./cmd/certs

$(CONTROLPLANE_BINS): $(CONTROLPLANE_INPUTS) | controlplane-go
	@test -n "$(CONTROLPLANE_K8S_MINOR)" || { echo "no k8s.io/kubernetes version in go.mod" >&2; exit 1; }
	@mkdir -p $(@D)
	cd $(CONTROLPLANE_SRC_DIR) && $(CONTROLPLANE_GOENV) go build -trimpath \
		-ldflags '$(CONTROLPLANE_LDFLAGS)' -o $(abspath $@).tmp $(CONTROLPLANE_PKG)
	@mv -f $@.tmp $@
