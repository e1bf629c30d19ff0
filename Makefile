# PermissionAudit: `make test` runs the whole suite on a fresh Debian machine with the Swift toolchain.
# It installs the Debian packages it needs when run as root, else prints the command to run.

SWIFT ?= swift
DEBIAN_PACKAGES := libpq-dev postgresql
TEST_HOME := /tmp/permaudit-test-$(shell id -u)

.PHONY: deps build release test clean

deps:
	@missing=""; \
	for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
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

# The suite (XCTest; no Swift Testing tests, so that runner is off) starts its own embedded
# PostgreSQL under $(TEST_HOME) and stops it afterwards.
test: deps
	@status=0; PERMAUDIT_TEST_HOME=$(TEST_HOME) $(SWIFT) test --disable-swift-testing || status=$$?; \
	if [ -x .build/debug/permaudit ]; then PERMAUDIT_HOME=$(TEST_HOME) .build/debug/permaudit db stop >/dev/null 2>&1 || true; fi; \
	exit $$status

clean:
	-PERMAUDIT_HOME=$(TEST_HOME) .build/debug/permaudit db stop
	-.build/debug/permaudit db stop
	rm -rf .build .permaudit
