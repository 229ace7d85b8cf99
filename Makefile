# Strata — two commands do everything on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
DEB_PACKAGES := libsqlite3-dev libzstd-dev libpng-dev libwebp-dev pkg-config
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SWIFT_BUILD_FLAGS ?=

.PHONY: deps build release test run bench-store soak clean

# Where `make run` keeps the node's data (override: make run DATA=/path PORT=7401).
DATA ?= ./strata-data
PORT ?= 7400

# Installs only the Debian packages that are missing (apt-get update first, once).
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	swift build $(SWIFT_BUILD_FLAGS)

release: deps
	swift build -c release $(SWIFT_BUILD_FLAGS)

# Every test: unit, storage (real SQLite files in temp dirs), crash (SIGKILLed child processes).
test: deps
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	swift test --skip-build $(SWIFT_BUILD_FLAGS)

# One node in the foreground on 127.0.0.1:$(PORT), data in $(DATA). Ctrl-C stops it cleanly.
run: release
	.build/release/strata serve --host 127.0.0.1 --port $(PORT) --data $(DATA)

# The embedded store benchmark (issue 2's figures); see bench/RESULTS.md.
bench-store: release
	.build/release/strata-bench store

# Long runs (fuzzing, soak) belong here, never in `make test`.
soak: release
	STRATA_SOAK=1 swift test -c release --filter Soak

clean:
	swift package clean
