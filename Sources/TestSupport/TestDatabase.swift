import EventLog
import Foundation
import Postgres

/// Databases for tests: the test run starts its own embedded cluster (the same code the CLI
/// uses) under `$PERMAUDIT_TEST_HOME` (default `/tmp/permaudit-test-<uid>`, a place the
/// unprivileged server user can reach wherever the checkout is), migrates a template database
/// once per process, and gives each test a fresh copy of it.
public enum TestDatabase {
    /// The cluster and the migrated template, prepared once per test process.
    private static let prepared: Result<EmbeddedCluster, any Error> = Result {
        let cluster = EmbeddedCluster(home: home)
        try cluster.start()
        try cluster.dropDatabase("permaudit_template")
        try cluster.createDatabase("permaudit_template")
        let template = try Connection(url: cluster.url(database: "permaudit_template"))
        try Migrator(directory: sqlDirectory).migrate(template)
        return cluster
    }

    /// Where the test cluster lives.
    public static var home: URL {
        if let path = ProcessInfo.processInfo.environment["PERMAUDIT_TEST_HOME"], !path.isEmpty {
            return URL(fileURLWithPath: path)
        }
        return URL(fileURLWithPath: "/tmp/permaudit-test-\(getuid())")
    }

    public static var cluster: EmbeddedCluster {
        get throws { try prepared.get() }
    }

    /// A new, migrated database; returns its URL.
    public static func create(migrated: Bool = true) throws -> String {
        let cluster = try cluster
        let name = "test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        try cluster.createDatabase(String(name), template: migrated ? "permaudit_template" : "template0")
        return cluster.url(database: String(name))
    }

    /// Drops a database made by `create` (best effort, for tear-down).
    public static func drop(_ url: String) {
        guard let cluster = try? cluster, let name = url.split(separator: "?").first?.split(separator: "/").last else { return }
        try? cluster.dropDatabase(String(name))
    }

    /// Terminates every other client connection to `db`'s database (as a server restart would end
    /// them) and returns how many it ended.
    @discardableResult
    public static func terminateOtherClients(_ db: Connection) throws -> Int {
        try db.query("""
            select count(pg_terminate_backend(pid))::int from pg_stat_activity
             where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
            """).scalar(Int.self)
    }

    /// Copies the log's newest event in again, as a new version of its stream, with a transaction
    /// id the cluster has not reached: what a logical dump restored into another cluster leaves
    /// (042). `db` must be a superuser's (the test cluster's role is).
    public static func addAnEventAheadOfTheTransactionCounter(_ db: Connection) throws {
        try db.execute("""
            insert into audit.events (transaction_id, event_id, stream_key, stream_version, type, occurred_at,
                                      app, platform, os_major, app_version, attempt, permission, flow, payload)
            select (pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::numeric + 1000000)::text::xid8,
                   gen_random_uuid(), stream_key, stream_version + 1, type, occurred_at, app, platform, os_major,
                   app_version, attempt, permission, flow, payload
              from audit.events where position = (select max(position) from audit.events)
            """)
    }

    /// The repository root (where Package.swift is).
    public static let packageRoot: URL = {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while directory.path != "/" {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path) { return directory }
            directory.deleteLastPathComponent()
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    }()

    public static var sqlDirectory: URL { packageRoot.appendingPathComponent("sql") }

    /// The ```sql blocks of a document of the repository, in order.
    public static func sqlBlocks(ofDocument path: String) throws -> [String] {
        let text = try String(contentsOf: packageRoot.appendingPathComponent(path), encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]? = nil
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.trimmingCharacters(in: .whitespaces) == "```sql" { current = []; continue }
            if line.hasPrefix("```"), let body = current {
                blocks.append(body.joined(separator: "\n"))
                current = nil
                continue
            }
            current?.append(line)
        }
        return blocks
    }

    /// The `permaudit` executable of this build (beside the test bundle, else `.build/debug`).
    public static var permauditBinary: URL {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("permaudit")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return packageRoot.appendingPathComponent(".build/debug/permaudit")
    }
}
