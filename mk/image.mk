# Release artifacts without a container engine (docs/operations.md, "The container image"):
#
#   make image           # the release binary as an OCI image layout in target/oci/volmig
#   make chart-package   # the chart as target/charts/volmig-<version>.tgz (helm package)
#   make krew            # the kubectl plugin archive and its krew manifest in target/krew
#
# The image layout is written by scripts/oci-image.sh with umoci (Debian's `umoci`);
# `skopeo` (Debian's) reads it and pushes it:
#   skopeo inspect --config oci:target/oci/volmig:<version>
#   skopeo copy oci:target/oci/volmig:<version> docker://<registry>/volmig:<version>
# Both are installed from apt when missing (idempotent). tests/image.rs builds a layout
# with the same script and reads it back.

IMAGE_APT_PACKAGES := umoci skopeo
IMAGE_LAYOUT ?= $(TARGET_DIR)/oci/volmig
IMAGE_BINARY ?= $(TARGET_DIR)/release/volmig
# The package version of Cargo.toml (the chart's appVersion, its default image tag).
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)
CHART_PACKAGE_DIR ?= $(TARGET_DIR)/charts

.PHONY: image image-tools chart-package
image-tools:
	@missing=""; for p in $(IMAGE_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

image: image-tools release
	scripts/oci-image.sh $(IMAGE_BINARY) $(IMAGE_LAYOUT) $(IMAGE_TAG)
	@echo "push: skopeo copy oci:$(IMAGE_LAYOUT):$(IMAGE_TAG) docker://<registry>/volmig:$(IMAGE_TAG)"

chart-package: helm
	@mkdir -p $(CHART_PACKAGE_DIR)
	$(HELM) package charts/volmig --destination $(CHART_PACKAGE_DIR)

test-components: image-tools

# The krew plugin archive and manifest (krew/volmig.yaml with the archive's sha256).
KREW_DIR ?= $(TARGET_DIR)/krew
KREW_ARCHIVE := $(KREW_DIR)/volmig-v$(IMAGE_TAG)-linux-amd64.tar.gz

.PHONY: krew krew-archive
krew: release
	$(MAKE) krew-archive

krew-archive:
	@mkdir -p $(KREW_DIR)/stage
	install -m 0755 $(IMAGE_BINARY) $(KREW_DIR)/stage/volmig
	install -m 0644 LICENSE $(KREW_DIR)/stage/LICENSE
	tar -C $(KREW_DIR)/stage -czf $(KREW_ARCHIVE) volmig LICENSE
	sed "s/@SHA256@/$$(sha256sum $(KREW_ARCHIVE) | cut -d' ' -f1)/" krew/volmig.yaml > $(KREW_DIR)/volmig.yaml
	@echo "wrote $(KREW_ARCHIVE) and $(KREW_DIR)/volmig.yaml"
