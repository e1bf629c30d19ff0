@testable import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// A cluster of its own (not the suite's shared one): its creation, start and stop in states
/// that an interrupted creation or a server that did not stop leave behind.
final class EmbeddedClusterTests: XCTestCase {
    /// The home's name has a quote, which the server's settings file must escape.
    func testACreationKilledHalfWayAndAStaleLockFileNamingAnotherProcess() throws {
        let home = URL(fileURLWithPath: "/tmp/pa-it's-\(UUID().uuidString.prefix(8))")
        let cluster = EmbeddedCluster(home: home)
        defer {
            try? cluster.stop()
            try? FileManager.default.removeItem(at: home)
        }
        // What a creation killed during initdb leaves: a staging directory, no pgdata.
        let staging = home.appendingPathComponent("pgdata.creating")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        try Data("half".utf8).write(to: staging.appendingPathComponent("PG_VERSION"))
        XCTAssertEqual(try cluster.status(), .notCreated)

        let db = try Connection(url: try cluster.start())
        XCTAssertFalse(FileManager.default.fileExists(atPath: staging.path))
        XCTAssertEqual(try db.query("show listen_addresses").scalar(String.self), "")
        XCTAssertEqual(try db.query("select count(*) from pg_hba_file_rules where type <> 'local' and auth_method <> 'reject'").scalar(Int.self), 0,
                       "no way in over TCP, even if listen_addresses is changed")
        guard case .running(let serverPID) = try cluster.status() else { return XCTFail("not running") }

        // A lock file naming a live process of the server's user that is not this server (here a
        // backend of the suite's cluster): the cluster is stopped, stop signals nobody, start
        // starts it.
        try cluster.stop()
        let otherURL = try TestDatabase.create(migrated: false)
        defer { TestDatabase.drop(otherURL) }
        let other = try Connection(url: otherURL)
        let otherPID: Int = try other.query("select pg_backend_pid()").scalar()
        let lockFile = cluster.dataDirectory.appendingPathComponent("postmaster.pid")
        try "\(otherPID)\n\(cluster.dataDirectory.path)\n".write(to: lockFile, atomically: false, encoding: .utf8)
        XCTAssertEqual(try cluster.status(), .stopped)
        try cluster.stop()
        XCTAssertEqual(try other.query("select 1").scalar(Int.self), 1, "the other process was not signalled")
        try cluster.start()
        guard case .running(let restartedPID) = try cluster.status() else { return XCTFail("not restarted") }
        XCTAssertNotEqual(restartedPID, serverPID)
        XCTAssertNotEqual(restartedPID, otherPID)
    }

    /// A cluster without the embedded cluster's settings (an earlier version's creation killed
    /// between initdb and the settings: PostgreSQL's defaults listen on TCP) is refused.
    func testAClusterWithoutTheEmbeddedSettingsIsRefused() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("pa-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: home) }
        let data = home.appendingPathComponent("pgdata")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        try Data("15\n".utf8).write(to: data.appendingPathComponent("PG_VERSION"))
        try Data("listen_addresses = 'localhost'\n".utf8).write(to: data.appendingPathComponent("postgresql.conf"))
        XCTAssertThrowsError(try EmbeddedCluster(home: home).start()) { error in
            XCTAssertTrue("\(error)".contains("is not set up as the embedded cluster"), "\(error)")
        }
    }

    /// libpq reads a comma in a host as a list: such a home is refused before anything is created.
    func testAHomeWithACommaIsRefused() {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("pa,\(UUID().uuidString.prefix(8))")
        XCTAssertThrowsError(try EmbeddedCluster(home: home).start()) { error in
            XCTAssertTrue("\(error)".contains("contains a comma"), "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path))
    }
}
