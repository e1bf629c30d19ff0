# PermissionAudit on a fresh Debian machine with the Swift toolchain:
#   make demo   simulate, ingest, project and report on the embedded database (reports/demo/)
#   make test   the whole test suite against its own embedded PostgreSQL
# Each installs the Debian packages it needs when run as root, else prints the command to run.

SWIFT ?= swift
# libmicrohttpd and zlib: the HTTP collector (permaudit serve) and its gzip bodies.
DEBIAN_PACKAGES := libpq-dev postgresql libmicrohttpd-dev zlib1g-dev libssl-dev
# The report test renders the HTML report in headless Chromium.
TEST_PACKAGES := $(DEBIAN_PACKAGES) chromium fonts-dejavu-core
TEST_HOME := /tmp/permaudit-test-$(shell id -u)

.PHONY: deps test-deps packages build release demo test sanitize clean

deps:
	@$(MAKE) --no-print-directory packages PACKAGES="$(DEBIAN_PACKAGES)"

test-deps:
	@$(MAKE) --no-print-directory packages PACKAGES="$(TEST_PACKAGES)"

packages:
	@missing=""; \
	for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "Installing Debian packages:$$missing"; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
		else \
			echo "Missing Debian packages:$$missing"; \
			echo "Run: sudo apt-get update && sudo apt-get install -y$$missing"; \
			exit 1; \
		fi; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

# The main job: the embedded database in ./.permaudit, the report in reports/demo/.
demo: release
	.build/release/permaudit demo

# The suite (XCTest; no Swift Testing tests, so that runner is off) starts its own embedded
# PostgreSQL under $(TEST_HOME) and stops it afterwards.
test: test-deps
	@status=0; PERMAUDIT_TEST_HOME=$(TEST_HOME) $(SWIFT) test --disable-swift-testing || status=$$?; \
	if [ -x .build/debug/permaudit ]; then PERMAUDIT_HOME=$(TEST_HOME) .build/debug/permaudit db stop >/dev/null 2>&1 || true; fi; \
	exit $$status

# The suite under Swift's thread sanitizer, then under its address sanitizer, each in its own
# build directory and test cluster (6-9 minutes each on 2 cores). A data race or a memory
# error fails the run. Leak detection is off: Foundation's Process leaks 32 bytes per launch.
sanitize: test-deps
	@for sanitizer in thread address; do \
		home=/tmp/permaudit-$$sanitizer-$(shell id -u); build=.build/sanitize-$$sanitizer; status=0; \
		PERMAUDIT_TEST_HOME=$$home ASAN_OPTIONS=detect_leaks=0 \
			$(SWIFT) test --disable-swift-testing --sanitize=$$sanitizer --scratch-path $$build || status=$$?; \
		if [ -x $$build/debug/permaudit ]; then ASAN_OPTIONS=detect_leaks=0 PERMAUDIT_HOME=$$home $$build/debug/permaudit db stop >/dev/null 2>&1 || true; fi; \
		[ $$status = 0 ] || exit $$status; \
	done

clean:
	-PERMAUDIT_HOME=$(TEST_HOME) .build/debug/permaudit db stop
	-.build/debug/permaudit db stop
	rm -rf .build .permaudit
