// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PermissionAudit",
    products: [
        .library(name: "Postgres", targets: ["Postgres"]),
        .library(name: "PermissionEvents", targets: ["PermissionEvents"]),
        .library(name: "EventLog", targets: ["EventLog"]),
        .library(name: "Projections", targets: ["Projections"]),
        .library(name: "Analytics", targets: ["Analytics"]),
        .library(name: "Dashboards", targets: ["Dashboards"]),
        .library(name: "Collector", targets: ["Collector"]),
        .executable(name: "permaudit", targets: ["permaudit"]),
    ],
    targets: [
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        .target(name: "Postgres", dependencies: ["CLibPQ"]),
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .target(name: "Crypto", dependencies: ["CCrypto"]),
        .target(name: "Compliance", dependencies: ["Crypto", "EventLog", "Postgres", "PermissionEvents"]),
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .target(name: "MicroHTTP", dependencies: ["CMicroHTTPD", "CZlib"]),
        .target(name: "Collector", dependencies: ["MicroHTTP", "EventLog", "PermissionEvents", "Postgres"]),
        .target(name: "PermissionEvents"),
        .target(
            name: "EventLog",
            dependencies: ["Postgres", "PermissionEvents"]
        ),
        .target(name: "Projections", dependencies: ["EventLog", "Postgres"]),
        .target(name: "Analytics", dependencies: ["Postgres", "PermissionEvents"]),
        .target(name: "Simulation", dependencies: ["PermissionEvents"]),
        .target(name: "Reports", dependencies: ["Analytics", "Compliance", "Postgres", "PermissionEvents"]),
        .target(name: "Dashboards"),
        .target(name: "Benchmarks", dependencies: ["EventLog", "Postgres", "Projections", "Simulation", "Analytics", "Reports", "Dashboards", "Compliance", "Crypto", "Collector", "MicroHTTP"]),
        .executableTarget(
            name: "permaudit",
            dependencies: ["EventLog", "PermissionEvents", "Postgres", "Projections", "Analytics", "Benchmarks", "Simulation", "Reports", "Compliance", "Crypto", "Collector", "MicroHTTP"]
        ),
        .target(name: "TestSupport", dependencies: ["EventLog", "Postgres", "PermissionEvents", "Benchmarks", "Simulation", "Projections"]),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "TestSupport"]),
        .testTarget(name: "PermissionEventsTests", dependencies: ["PermissionEvents", "TestSupport"]),
        .testTarget(name: "EventLogTests", dependencies: ["EventLog", "PermissionEvents", "Postgres", "TestSupport", "Benchmarks"]),
        .testTarget(name: "ProjectionsTests", dependencies: ["Projections", "EventLog", "Postgres", "TestSupport"]),
        .testTarget(name: "AnalyticsTests", dependencies: ["Analytics", "TestSupport", "Postgres"]),
        .testTarget(name: "ReportsTests", dependencies: ["Reports", "Analytics", "Simulation", "Projections", "EventLog", "PermissionEvents", "Postgres", "TestSupport"]),
        .testTarget(name: "SimulationTests", dependencies: ["Simulation", "PermissionEvents"]),
        .testTarget(name: "ComplianceTests", dependencies: ["Compliance", "Crypto", "EventLog", "Postgres", "Projections", "TestSupport"]),
        .testTarget(name: "CollectorTests", dependencies: ["permaudit", "Collector", "MicroHTTP", "EventLog", "PermissionEvents", "Postgres", "TestSupport", "Simulation", "Benchmarks"]),
        .testTarget(name: "CLITests", dependencies: ["permaudit", "TestSupport", "Postgres", "EventLog"], exclude: ["Snapshots"]),
        .testTarget(
            name: "DashboardTests",
            dependencies: ["Dashboards", "Benchmarks", "TestSupport", "Postgres", "EventLog", "Projections", "Analytics", "permaudit"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
