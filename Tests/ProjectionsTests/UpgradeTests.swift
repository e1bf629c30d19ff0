import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

/// A database that an earlier schema's write path filled, migrated to the current one, holds and
/// shows what a database migrated from the start holds and shows for the same calls.
final class UpgradeTests: DatabaseTestCase {
    override class var migrated: Bool { false }

    /// The newest ten migrations applied over a log, a link table and an erasure written before
    /// them; then more events (some of the erased install's), projected. The log, the streams and
    /// every analytics view equal those of a database that had every migration first.
    func testAPopulatedDatabaseUpgradesToWhatANewOneHolds() throws {
        let migrator = try Migrator(directory: TestDatabase.sqlDirectory)
        let earlier = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-sql-\(UUID())")
        try FileManager.default.createDirectory(at: earlier, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: earlier) }
        for migration in migrator.migrations.dropLast(10) {
            try FileManager.default.copyItem(at: TestDatabase.sqlDirectory.appendingPathComponent(migration.name),
                                             to: earlier.appendingPathComponent(migration.name))
        }
        let upgraded = try Connection(url: url)
        try Migrator(directory: earlier).migrate(upgraded)

        let newURL = try TestDatabase.create()
        defer { TestDatabase.drop(newURL) }
        let new = try Connection(url: newURL)

        var random = RandomEvents(seed: 29)
        var events = random.events(attempts: 500, subjects: 60)
        events.shuffle(using: &random.generator)  // late and out of order
        let half = events.count / 2
        // The write path's SQL (its signature is the contract), as any client of either schema calls it.
        func append(_ slice: ArraySlice<String>, to db: Connection) throws {
            for start in stride(from: slice.startIndex, to: slice.endIndex, by: 100) {
                let batch = "[" + slice[start..<min(start + 100, slice.endIndex)].joined(separator: ",") + "]"
                try db.query("select * from audit.append_events($1::jsonb)", [batch])
            }
        }
        func erase(_ app: String, _ subject: String, in db: Connection) throws {
            try db.query("select audit.erase_subject($1, $2, $3)", [app, subject, "upgrade test"])
        }
        for db in [upgraded, new] { try append(events[..<half], to: db) }
        let (app, subject) = try upgraded.query("select app, subject from audit.subject_streams order by stream_key limit 1")
            .decode((String, String).self)[0]
        for db in [upgraded, new] { try erase(app, subject, in: db) }

        let outcome = try migrator.migrate(upgraded)
        XCTAssertEqual(outcome.applied, migrator.migrations.suffix(10).map(\.name))
        for db in [upgraded, new] {
            try append(events[half...], to: db)
            try Projector(connection: db).catchUp()
        }

        let log = """
            select e.position, e.event_id, e.stream_key, e.stream_version, e.type, e.occurred_at, e.app, e.platform,
                   e.os_major, e.app_version, e.attempt, e.permission, e.flow, e.payload::text, s.subject
              from audit.events e left join audit.subject_streams s on s.stream_key = e.stream_key
             order by e.position
            """
        let upgradedLog = try upgraded.query("select x::text from (\(log)) x").column(as: String.self)
        XCTAssertEqual(upgradedLog.count, events.count)
        XCTAssertEqual(upgradedLog, try new.query("select x::text from (\(log)) x").column(as: String.self))
        XCTAssertEqual(try upgraded.query("select count(*)::int from audit.erasures").scalar(Int.self), 1)
        let views = try TestDatabase.analyticsSnapshot(upgraded)
        XCTAssertGreaterThan(views.count, 100)
        XCTAssertEqual(views, try TestDatabase.analyticsSnapshot(new))
    }
}
