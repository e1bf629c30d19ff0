# PermissionAudit: the permaudit command-line tool with its SQL migrations and dashboards.
# Build: docker build -t permaudit .      Run: see docker-compose.yml and docs/deployment.md.

# 1. Build with the Swift toolchain (Debian 12, like the runtime) and the C libraries' headers
#    (libpq; libmicrohttpd and zlib for the collector; libcrypto for seals).
FROM swift:6.0-bookworm AS builder
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libpq-dev libmicrohttpd-dev zlib1g-dev libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
# Package.swift declares the test targets too, so their directories must be present.
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
# The Swift runtime and Foundation linked in: the runtime image needs only the C libraries.
RUN swift build -c release --product permaudit --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/permaudit" /build/permaudit

# 2. Run on slim Debian with the C libraries, and psql for the deployment's one SQL step (deploy/).
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libpq5 libmicrohttpd12 zlib1g libssl3 postgresql-client ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin permaudit \
    && install -d -o permaudit -g permaudit -m 0700 /var/lib/permaudit /var/lib/permaudit/keys
COPY --from=builder /build/permaudit /usr/local/bin/permaudit
# permaudit finds its migrations in /usr/local/share/permaudit/sql.
COPY sql /usr/local/share/permaudit/sql
COPY deploy /usr/local/share/permaudit/deploy
COPY dashboards /usr/local/share/permaudit/dashboards
# PERMAUDIT_HOME holds the seal keys (keys/, a volume in docker-compose.yml, which a new volume
# takes with this directory's owner); the database is always DATABASE_URL's.
ENV PERMAUDIT_HOME=/var/lib/permaudit \
    PERMAUDIT_SQL_DIR=/usr/local/share/permaudit/sql \
    PERMAUDIT_DASHBOARDS_DIR=/usr/local/share/permaudit/dashboards/dashboards
USER permaudit
CMD ["permaudit", "--help"]
