# vCenter simulator harness (tests/support/vcsim/): a Go program over govmomi's simulator,
# built from Debian's golang-go and golang-github-vmware-govmomi-dev in GOPATH mode.
# `make vcsim` installs the two packages when absent and rebuilds the binary only when its
# sources (or this file, or the installed govmomi) changed, after `go vet` and `go test`.

VCSIM_SRC_DIR := tests/support/vcsim
VCSIM_BIN := $(TARGET_DIR)/vcsim/vcsim-harness
VCSIM_SOURCES := $(wildcard $(VCSIM_SRC_DIR)/*.go)
VCSIM_APT_PACKAGES := golang-go golang-github-vmware-govmomi-dev
VCSIM_GOPATH := /usr/share/gocode
# Rebuild when the Debian govmomi package changes (empty before it is installed).
VCSIM_GOVMOMI_STAMP := $(wildcard $(VCSIM_GOPATH)/src/github.com/vmware/govmomi/go.mod)
VCSIM_SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
VCSIM_GOENV := GO111MODULE=off GOPATH=$(VCSIM_GOPATH) GOCACHE=$(TARGET_DIR)/go-cache \
	GOFLAGS= CGO_ENABLED=0

.PHONY: vcsim vcsim-deps vcsim-soap-notes
vcsim: $(VCSIM_BIN)

# The end-to-end tests need the harness (make merges this with the root prerequisites).
test-components: vcsim

vcsim-deps:
	@missing=""; for p in $(VCSIM_APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(VCSIM_SUDO) apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive $(VCSIM_SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VCSIM_BIN): $(VCSIM_SOURCES) $(VCSIM_GOVMOMI_STAMP) mk/vcsim.mk | vcsim-deps
	@mkdir -p $(@D) $(TARGET_DIR)/go-cache
	cd $(VCSIM_SRC_DIR) && $(VCSIM_GOENV) go vet . && $(VCSIM_GOENV) go test -count=1 . && $(VCSIM_GOENV) go build -trimpath -o $(abspath $@).tmp .
	@mv -f $@.tmp $@

# Regenerates the captured exchanges at the end of SOAP-NOTES.md from the real harness.
vcsim-soap-notes: vcsim
	@notes=$(VCSIM_SRC_DIR)/SOAP-NOTES.md; \
	sed '/^# Captured exchanges$$/q' $$notes > $$notes.new; \
	echo >> $$notes.new; \
	$(VCSIM_SRC_DIR)/soap-samples.sh $(VCSIM_BIN) >> $$notes.new; \
	mv -f $$notes.new $$notes
