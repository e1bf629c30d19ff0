@testable import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

final class MigratorTests: DatabaseTestCase {
    override class var migrated: Bool { false }

    func testAppliesOnceInOrderAndRefusesEditedMigrations() throws {
        let db = try Connection(url: url)
        let migrator = try Migrator(directory: TestDatabase.sqlDirectory)
        XCTAssertEqual(try migrator.pending(db).count, migrator.migrations.count)
        let first = try migrator.migrate(db)
        XCTAssertEqual(first.applied, migrator.migrations.map(\.name))
        XCTAssertEqual(first.applied, first.applied.sorted())
        let second = try migrator.migrate(db)
        XCTAssertEqual(second.applied, [])
        XCTAssertEqual(second.alreadyApplied, migrator.migrations.count)
        XCTAssertEqual(try migrator.pending(db), [])

        // An edited, already-applied migration is an error.
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-sql-\(UUID())")
        try FileManager.default.copyItem(at: TestDatabase.sqlDirectory, to: copy)
        defer { try? FileManager.default.removeItem(at: copy) }
        let firstFile = copy.appendingPathComponent(migrator.migrations[0].name)
        try (try String(contentsOf: firstFile, encoding: .utf8) + "\n-- edited\n").write(to: firstFile, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try Migrator(directory: copy).migrate(db)) { error in
            XCTAssertTrue("\(error)".contains("already applied"), "\(error)")
        }
    }

    /// What a restore leaves wrong: migrate sets guard triggers back to ALWAYS and reports a
    /// transaction counter behind the log.
    func testMigrateRepairsWhatARestoreLeavesWrong() throws {
        let db = try Connection(url: url)
        let migrator = try Migrator(directory: TestDatabase.sqlDirectory)
        XCTAssertEqual(try migrator.migrate(db).restoreNotes, [])
        // pg_restore --data-only --disable-triggers ends with ENABLE TRIGGER ALL: ORIGIN.
        try db.execute("alter table audit.events disable trigger all; alter table audit.events enable trigger all")
        func modes() throws -> [String] {
            try db.query("""
                select t.tgname::text || ' ' || t.tgenabled::text from pg_catalog.pg_trigger t
                 where t.tgrelid = 'audit.events'::pg_catalog.regclass and not t.tgisinternal order by 1
                """).column(as: String.self)
        }
        XCTAssertEqual(try modes(), ["events_after_the_counter O", "events_append_only O", "events_no_truncate O"])
        let notes = try migrator.migrate(db).restoreNotes
        XCTAssertEqual(notes.count, 3, "\(notes)")
        XCTAssertTrue(notes[1].hasPrefix("trigger events_append_only on audit.events fires ALWAYS again"), notes[1])
        XCTAssertEqual(try modes(), ["events_after_the_counter A", "events_append_only A", "events_no_truncate A"])
        try db.execute("set session_replication_role = replica")
        XCTAssertThrowsError(try db.execute("truncate audit.events"))
        try db.execute("reset session_replication_role")

        // An event whose transaction id the cluster has not reached, as a restore into another cluster leaves it.
        try EventLog(connection: db).append([EventFixtures.event()])
        try TestDatabase.addAnEventAheadOfTheTransactionCounter(db)
        XCTAssertEqual(try migrator.migrate(db).restoreNotes.map { $0.prefix(51) }, ["the cluster's transaction counter is behind the log"])
    }

    /// A database with a migration the directory does not hold (a newer permaudit migrated it) is
    /// refused, not reported current; a directory that does not exist is named.
    func testAMigrationTheDirectoryLacksIsRefused() throws {
        let db = try Connection(url: url)
        try Migrator(directory: TestDatabase.sqlDirectory).migrate(db)
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-sql-\(UUID())")
        try FileManager.default.copyItem(at: TestDatabase.sqlDirectory, to: copy)
        defer { try? FileManager.default.removeItem(at: copy) }
        let last = try Migrator(directory: copy).migrations.last!.name
        try FileManager.default.removeItem(at: copy.appendingPathComponent(last))
        XCTAssertThrowsError(try Migrator(directory: copy).migrate(db)) { error in
            XCTAssertTrue("\(error)".contains("has migration \(last) applied"), "\(error)")
        }
        let missing = copy.appendingPathComponent("nowhere")
        XCTAssertThrowsError(try Migrator(directory: missing)) { error in
            XCTAssertEqual("\(error)", "\(missing.path): cannot read the migrations directory")
        }
    }

    /// A database name is an identifier, never SQL (quotes included).
    func testTheClusterCreatesAndDropsDatabasesOfAnyName() throws {
        let cluster = try TestDatabase.cluster
        let name = "pa'; create table public.injected (i int); select '\"\(UUID().uuidString.prefix(8))"
        try cluster.createDatabase(name)
        try cluster.createDatabase(name)  // exists: nothing to do
        let admin = try Connection(url: cluster.url(database: "postgres"))
        XCTAssertTrue(try admin.query("select exists (select 1 from pg_database where datname = $1)", [name]).scalar(Bool.self))
        XCTAssertNil(try admin.query("select to_regclass('public.injected')::text").scalar(String?.self))
        try cluster.dropDatabase(name)
        XCTAssertFalse(try admin.query("select exists (select 1 from pg_database where datname = $1)", [name]).scalar(Bool.self))
    }

    /// A server killed with SIGKILL is a zombie until its parent collects it: pg_ctl counts it as
    /// running and a new server refuses its lock file, so `status` calls it stopped and `start`
    /// waits for it to go (before, `db start` right after the kill failed to connect).
    func testAnExitedProcessNotYetCollectedIsNoRunningServer() throws {
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { argv.forEach { free($0) } }
        XCTAssertEqual(posix_spawn(&pid, "/bin/true", nil, nil, argv, environ), 0)
        let deadline = Date().addingTimeInterval(10)
        while !EmbeddedCluster.isZombie(Int(pid)), Date() < deadline { usleep(10_000) }
        XCTAssertTrue(EmbeddedCluster.isZombie(Int(pid)), "exited, not collected")
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertFalse(EmbeddedCluster.isZombie(Int(pid)), "collected")
        XCTAssertFalse(EmbeddedCluster.isZombie(Int(getpid())), "running")
    }

    /// A home whose socket path cannot fit a Unix socket address is refused before anything is
    /// created (the server would fail with a message only its log shows).
    func testAHomeTooLongForTheSocketIsRefused() {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent(String(repeating: "h", count: 100))
        XCTAssertThrowsError(try EmbeddedCluster(home: home).start()) { error in
            XCTAssertTrue("\(error)".contains("is too long"), "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path))
    }

    func testAFailingMigrationLeavesNothingHalfApplied() throws {
        let db = try Connection(url: url)
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-sql-\(UUID())")
        try FileManager.default.copyItem(at: TestDatabase.sqlDirectory, to: copy)
        defer { try? FileManager.default.removeItem(at: copy) }
        try "create table audit.half_done (id int);\nselect 1/0;\n".write(to: copy.appendingPathComponent("999_broken.sql"), atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try Migrator(directory: copy).migrate(db)) { error in
            XCTAssertTrue("\(error)".contains("999_broken.sql"), "\(error)")
        }
        XCTAssertEqual(try db.query("select to_regclass('audit.half_done') is null").scalar(Bool.self), true)
        XCTAssertEqual(try db.query("select max(version) from permaudit.schema_migrations").scalar(Int.self), try Migrator(directory: TestDatabase.sqlDirectory).migrations.last!.version)
    }

    /// A login that is not a superuser migrates a new database once it is a member of
    /// permaudit_owner (docs/deployment.md, "The migrating login"); before, 011 stopped with
    /// "must be member of role", and now the error says what to grant. Its migrate reports 032's
    /// notice (install ids sampled before 032 stay in pg_statistic), which went nowhere.
    func testALoginThatIsNotASuperuserMigratesAsDeploymentSays() throws {
        let login = "migrator_" + UUID().uuidString.lowercased().prefix(8)
        let admin = try Connection(url: try TestDatabase.cluster.url(database: "postgres"))
        try admin.execute("create role \(login) login createrole")
        defer {
            TestDatabase.drop(url)
            _ = try? admin.execute("drop role \(login)")
        }
        let name = String(url.split(separator: "?")[0].split(separator: "/").last!)
        try admin.execute("alter database \(name) owner to \(login)")
        let db = try Connection(url: url.replacingOccurrences(of: "user=permaudit", with: "user=\(login)"))
        let migrator = try Migrator(directory: TestDatabase.sqlDirectory)

        XCTAssertThrowsError(try migrator.migrate(db)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.hasPrefix("011_compliance.sql: must be member of role \"permaudit_owner\"; the login that migrates"), text)
            XCTAssertTrue(text.contains("grant permaudit_owner to <login>;"), text)
        }
        try admin.execute("grant permaudit_owner to \(login)")
        let outcome = try migrator.migrate(db)
        XCTAssertEqual(outcome.applied.first, "011_compliance.sql")
        XCTAssertEqual(try migrator.pending(db), [])
        XCTAssertEqual(outcome.notices, ["032_link_rows_change_only_by_erasure.sql: notice: statistics sampled from "
                                         + "audit.subject_streams.subject stay until a superuser deletes them from pg_statistic"])
        XCTAssertEqual(try db.query("select count(*)::int from audit.events").scalar(Int.self), 0)
    }

    /// deploy/migrate-with-psql.sh (a DBA's way, psql alone) records what the migrator records: the
    /// two carry on from each other, and both refuse an edited migration or half a failed one.
    func testTheMigrationsApplyWithPsqlAlone() throws {
        let db = try Connection(url: url)
        let migrator = try Migrator(directory: TestDatabase.sqlDirectory)
        let half = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-sql-\(UUID())")
        try FileManager.default.createDirectory(at: half, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: half) }
        let firstHalf = migrator.migrations.prefix(migrator.migrations.count / 2)
        for migration in firstHalf {
            try FileManager.default.copyItem(at: TestDatabase.sqlDirectory.appendingPathComponent(migration.name),
                                             to: half.appendingPathComponent(migration.name))
        }

        let byPsql = try migrateWithPsql(half)
        XCTAssertEqual(byPsql.status, 0, byPsql.errors)
        XCTAssertEqual(byPsql.output, firstHalf.map { "applied \($0.name)\n" }.joined() + "\(firstHalf.count) applied\n")
        let rest = try migrator.migrate(db)  // checks the checksums the script recorded
        XCTAssertEqual(rest.alreadyApplied, firstHalf.count)
        XCTAssertEqual(rest.applied, migrator.migrations.dropFirst(firstHalf.count).map(\.name))
        let again = try migrateWithPsql(TestDatabase.sqlDirectory)
        XCTAssertEqual(again.status, 0, again.errors)
        XCTAssertEqual(again.output, "0 applied\n")

        // An edited applied file, a failing new one: refused, nothing half-written.
        try (try String(contentsOf: half.appendingPathComponent(firstHalf[0].name), encoding: .utf8) + "\n-- edited\n")
            .write(to: half.appendingPathComponent(firstHalf[0].name), atomically: true, encoding: .utf8)
        let edited = try migrateWithPsql(half)
        XCTAssertEqual(edited.status, 1)
        XCTAssertTrue(edited.errors.contains("\(firstHalf[0].name): already applied but its text has changed"), edited.errors)
        let broken = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-sql-\(UUID())")
        try FileManager.default.copyItem(at: TestDatabase.sqlDirectory, to: broken)
        defer { try? FileManager.default.removeItem(at: broken) }
        try "create table audit.half_done (id int);\nselect 1/0;\n".write(to: broken.appendingPathComponent("999_broken.sql"), atomically: true, encoding: .utf8)
        let failed = try migrateWithPsql(broken)
        XCTAssertNotEqual(failed.status, 0)
        XCTAssertTrue(failed.errors.contains("999_broken.sql:2: ERROR:  division by zero"), failed.errors)
        XCTAssertEqual(try db.query("select to_regclass('audit.half_done') is null").scalar(Bool.self), true)
        XCTAssertEqual(try migrator.pending(db), [])
        XCTAssertEqual(try db.query("select count(*)::int from permaudit.schema_migrations").scalar(Int.self), migrator.migrations.count)
    }

    private func migrateWithPsql(_ directory: URL) throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [TestDatabase.packageRoot.appendingPathComponent("deploy/migrate-with-psql.sh").path, url, directory.path]
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = try PostgresBinaries.locate().directory + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        process.environment = environment
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: outputData, as: UTF8.self), String(decoding: errorData, as: UTF8.self))
    }
}
