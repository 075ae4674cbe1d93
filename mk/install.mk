# `make install`: the release binary (the `release` target's build, as the Dockerfile
# builds it) as $(PREFIX)/bin/volmig, plus the kubectl plugin `kubectl-volmig` next to it:
# a symlink to volmig, which names itself `kubectl volmig` when run under that name, so
# `kubectl volmig report|lookup` works. Idempotent: running it again replaces both.
#
#   make install                                  # /usr/local/bin/volmig + kubectl-volmig
#   make install PREFIX=$HOME/.local              # no root needed
#   make install DESTDIR=/tmp/stage PREFIX=/usr   # staged, for a package

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
INSTALL_DIR := $(DESTDIR)$(BINDIR)

.PHONY: install
install: release
	install -d $(INSTALL_DIR)
	install -m 0755 $(TARGET_DIR)/release/volmig $(INSTALL_DIR)/volmig
	ln -sfn volmig $(INSTALL_DIR)/kubectl-volmig
	@echo "installed $(INSTALL_DIR)/volmig and $(INSTALL_DIR)/kubectl-volmig (kubectl volmig)"
