import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

final class MigratorTests: XCTestCase {
    var url = ""
    override func setUpWithError() throws { url = try TestDatabase.create(migrated: false) }
    override func tearDown() { TestDatabase.drop(url) }

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
}
