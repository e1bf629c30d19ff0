import Foundation
import Postgres

/// Applies the numbered SQL files of `sql/` in order, each once and in its own transaction,
/// recording a SHA-256 checksum in `permaudit.schema_migrations`. An applied file whose text
/// changed is an error, never silently re-applied.
public struct Migrator {
    public struct Migration: Sendable {
        public var version: Int
        public var name: String
        public var sql: String
    }

    public struct Outcome: Sendable {
        public var applied: [String]
        public var alreadyApplied: Int
        /// What `repairAfterRestore` repaired or found wrong, one sentence each.
        public var restoreNotes: [String] = []
        /// The notices and warnings the migrations applied raised, each after its file's name
        /// (032 says so where a login that is not a superuser leaves install ids in pg_statistic).
        public var notices: [String] = []
    }

    public let migrations: [Migration]
    /// Where the migrations were read from.
    public let directory: URL

    public init(directory: URL) throws {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else {
            throw MigrationError("\(directory.path): cannot read the migrations directory")
        }
        let files = names.filter { $0.hasSuffix(".sql") }.sorted()
        var migrations: [Migration] = []
        for file in files {
            guard let version = Int(file.prefix { $0.isNumber }) else {
                throw MigrationError("\(file): migration files are named NNN_name.sql")
            }
            if migrations.contains(where: { $0.version == version }) {
                throw MigrationError("\(file): two migrations have version \(version)")
            }
            let sql = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            migrations.append(Migration(version: version, name: file, sql: sql))
        }
        guard !migrations.isEmpty else { throw MigrationError("no migrations in \(directory.path)") }
        self.migrations = migrations
        self.directory = directory
    }

    /// The `sql/` directory: `PERMAUDIT_SQL_DIR`, else the nearest `sql/` holding `001_*.sql`
    /// above the working directory or the executable.
    public static func locateDirectory() throws -> URL {
        let fm = FileManager.default
        if let env = ProcessInfo.processInfo.environment["PERMAUDIT_SQL_DIR"], !env.isEmpty {
            var isDirectory: ObjCBool = false
            guard fm.fileExists(atPath: env, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw MigrationError("PERMAUDIT_SQL_DIR=\(env): no such directory")
            }
            return URL(fileURLWithPath: env)
        }
        var starts = [URL(fileURLWithPath: fm.currentDirectoryPath)]
        // The executable's real path (argv[0] is a bare name when the shell found it on PATH).
        let executable = (try? fm.destinationOfSymbolicLink(atPath: "/proc/self/exe")).map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        starts.append(executable.deletingLastPathComponent())
        for start in starts {
            var directory = start.standardizedFileURL
            for _ in 0..<8 {
                let candidate = directory.appendingPathComponent("sql")
                if let files = try? fm.contentsOfDirectory(atPath: candidate.path), files.contains(where: { $0.hasPrefix("001_") }) {
                    return candidate
                }
                directory.deleteLastPathComponent()
            }
        }
        for installed in ["/usr/local/share/permaudit/sql", "/usr/share/permaudit/sql"] where fm.fileExists(atPath: installed) {
            return URL(fileURLWithPath: installed)
        }
        throw MigrationError("cannot find the sql/ migrations directory; set PERMAUDIT_SQL_DIR")
    }

    /// Applies every pending migration. Serialised across processes by an advisory lock.
    @discardableResult
    public func migrate(_ db: Connection) throws -> Outcome {
        // First the lock: two first migrations at once both got past "if not exists", and one
        // failed on the catalog's unique index (23505).
        try db.query("select pg_advisory_lock(hashtext('permaudit.migrate'))")
        defer { _ = try? db.query("select pg_advisory_unlock(hashtext('permaudit.migrate'))") }
        try db.execute("""
            create schema if not exists permaudit;
            create table if not exists permaudit.schema_migrations (
                version    integer primary key,
                name       text not null,
                checksum   text not null,
                applied_at timestamptz not null default now()
            );
            """)

        let recorded = try db.query("select version, name, checksum from permaudit.schema_migrations order by version")
            .decode((Int, String, String).self)
        // A database migrated by a newer permaudit (or from another sql/ directory): what this
        // directory would apply cannot be known to fit it.
        let known = Set(migrations.map(\.version))
        if let unknown = recorded.first(where: { !known.contains($0.0) }) {
            throw MigrationError("""
                the database has migration \(unknown.1) applied, which \(directory.path) does not hold: \
                this permaudit is older than the database, or PERMAUDIT_SQL_DIR names another sql/ directory
                """)
        }
        var applied: [String] = []
        var already = 0
        var notices: [String] = []
        let noticeHandler = db.onNotice
        defer { db.onNotice = noticeHandler }
        for migration in migrations {
            let checksum: String = try db.query("select encode(sha256(convert_to($1, 'UTF8')), 'hex')", [migration.sql]).scalar()
            if let row = recorded.first(where: { $0.0 == migration.version }) {
                guard row.2 == checksum else {
                    throw MigrationError("""
                        \(migration.name): already applied (as \(row.1)) but its text has changed since \
                        (checksum \(row.2.prefix(12))... recorded, \(checksum.prefix(12))... now); \
                        add a new migration instead of editing an applied one
                        """)
                }
                already += 1
                continue
            }
            db.onNotice = { notices.append("\(migration.name): \($0)") }
            do {
                try db.transaction {
                    try db.execute(migration.sql)
                    try db.query(
                        "insert into permaudit.schema_migrations (version, name, checksum) values ($1, $2, $3)",
                        [migration.version, migration.name, checksum]
                    )
                }
            } catch let error as PostgresError {
                throw MigrationError("\(migration.name): \(error.message)\(error.detail.map { " (\($0))" } ?? "")"
                                     + (error.code == .insufficientPrivilege ? Self.privilegeHint : ""))
            }
            db.onNotice = noticeHandler
            applied.append(migration.name)
        }
        return Outcome(applied: applied, alreadyApplied: already, restoreNotes: try Self.repairAfterRestore(db), notices: notices)
    }

    /// What a migration refused for want of a privilege needs: PostgreSQL 15 does not make a
    /// role's creator a member of it, and 011 gives the objects to `permaudit_owner`.
    static let privilegeHint = """
        ; the login that migrates must be a superuser, or own the database, have CREATEROLE and be a \
        member of permaudit_owner: as a superuser, `create role permaudit_owner nologin; grant \
        permaudit_owner to <login>;` then migrate again (docs/deployment.md, "The migrating login")
        """

    /// What a restore can leave wrong that the recorded migrations do not show (docs/deployment.md,
    /// "Restoring a logical dump"):
    /// - a guard trigger of schema `audit` that no longer fires ALWAYS: `pg_restore --data-only
    ///   --disable-triggers` ends with `ENABLE TRIGGER ALL`, which leaves them ENABLE ORIGIN, off
    ///   in sessions with `session_replication_role = replica`. Set back to ALWAYS here
    ///   (`access_log_role` is ORIGIN by design, 030: rows a logical replica applies keep theirs);
    /// - the cluster's transaction counter behind the log (a logical dump restored into another
    ///   cluster): appends fail with PA004 (042) until it is moved past the log; reported.
    static func repairAfterRestore(_ db: Connection) throws -> [String] {
        var notes: [String] = []
        let weakened = try db.query("""
            select c.relname::text, t.tgname::text
              from pg_catalog.pg_trigger t join pg_catalog.pg_class c on c.oid = t.tgrelid
             where c.relnamespace = 'audit'::pg_catalog.regnamespace and not t.tgisinternal
               and t.tgenabled <> 'A' and t.tgname <> 'access_log_role'
             order by 1, 2
            """).decode((String, String).self)
        for (table, trigger) in weakened {
            try db.execute("alter table audit.\(Connection.quoteIdentifier(table)) enable always trigger \(Connection.quoteIdentifier(trigger))")
            notes.append("trigger \(trigger) on audit.\(table) fires ALWAYS again (it did not: after pg_restore --disable-triggers, sessions with session_replication_role = replica could change the table)")
        }
        // (Asked where 042 is applied: a directory of fewer migrations, an earlier schema, has none.)
        let counterChecked: Bool = try db.query("select to_regprocedure('audit.transaction_counter_behind()') is not null").scalar()
        if try counterChecked && db.query("select audit.transaction_counter_behind()").scalar(Bool.self) {
            notes.append("the cluster's transaction counter is behind the log (a logical dump restored into another cluster?): appends fail with PA004 until it is moved past the log (docs/deployment.md, \"Restoring a logical dump\")")
        }
        return notes
    }

    /// Names of migrations not yet applied (empty when the schema is current).
    public func pending(_ db: Connection) throws -> [String] {
        let exists: Bool = try db.query("select to_regclass('permaudit.schema_migrations') is not null").scalar()
        guard exists else { return migrations.map(\.name) }
        let versions = Set(try db.query("select version from permaudit.schema_migrations").column(as: Int.self))
        return migrations.filter { !versions.contains($0.version) }.map(\.name)
    }
}

public struct MigrationError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
