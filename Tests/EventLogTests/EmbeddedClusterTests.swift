@testable import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// A cluster of its own (not the suite's shared one): its creation, start and stop in states
/// that an interrupted creation or a server that did not stop leave behind.
final class EmbeddedClusterTests: XCTestCase {
    /// The home's name has a quote, which the server's settings file must escape.
    func testACreationKilledHalfWayAndStaleLockFilesNamingAnotherProcess() throws {
        // A live process of the server's user (a backend of the suite's cluster) that started
        // well before this test's server: the process id a killed server's lock files may name.
        let otherURL = try TestDatabase.create(migrated: false)
        defer { TestDatabase.drop(otherURL) }
        let other = try Connection(url: otherURL)
        let otherPID: Int = try other.query("select pg_backend_pid()").scalar()
        Thread.sleep(forTimeInterval: 3)

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
        let lockFile = cluster.dataDirectory.appendingPathComponent("postmaster.pid")
        let socketLockFile = cluster.socketDirectory.appendingPathComponent(".s.PGSQL.5432.lock")
        XCTAssertTrue(cluster.isServer(serverPID, lockFile: lockFile))
        XCTAssertFalse(cluster.isServer(otherPID, lockFile: lockFile))
        XCTAssertTrue(cluster.socketAnswers())
        // The wall clock stepped since the server started: its command line still names it.
        let original = try String(contentsOf: lockFile, encoding: .utf8)
        var stepped = original.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        stepped[2] = String(Int(stepped[2])! - 3600)
        try stepped.joined(separator: "\n").write(to: lockFile, atomically: false, encoding: .utf8)
        XCTAssertTrue(cluster.isServer(serverPID, lockFile: lockFile), "a clock step")
        XCTAssertFalse(cluster.isServer(otherPID, lockFile: lockFile))
        try original.write(to: lockFile, atomically: false, encoding: .utf8)

        // The lock files of a server that did not stop, whose process id now belongs to the
        // other process: the cluster is stopped, stop signals nobody, start starts it. Then the
        // socket's lock file alone (postmaster.pid gone): start starts it too.
        let lines = try String(contentsOf: lockFile, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let socketLines = try String(contentsOf: socketLockFile, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        func leaveStaleLockFiles(_ files: [(URL, [String])]) throws {
            try cluster.stop()
            XCTAssertFalse(cluster.socketAnswers())
            for (file, lines) in files {
                try (["\(otherPID)"] + lines.dropFirst()).joined(separator: "\n").write(to: file, atomically: false, encoding: .utf8)
            }
        }
        var previousPID = serverPID
        for files in [[(lockFile, lines), (socketLockFile, socketLines)], [(socketLockFile, socketLines)]] {
            try leaveStaleLockFiles(files)
            XCTAssertEqual(try cluster.status(), .stopped)
            try cluster.stop()
            XCTAssertEqual(try other.query("select 1").scalar(Int.self), 1, "the other process was not signalled")
            try cluster.start()
            guard case .running(let restartedPID) = try cluster.status() else { return XCTFail("not restarted") }
            XCTAssertNotEqual(restartedPID, previousPID)
            XCTAssertNotEqual(restartedPID, otherPID)
            previousPID = restartedPID
        }
    }

    /// A pgdata that exists already, here a link to a directory elsewhere (another disk), is
    /// created in place, through the link.
    func testAPgdataLinkedElsewhereIsCreatedInPlace() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("pa-\(UUID().uuidString.prefix(8))")
        let elsewhere = base.appendingPathComponent("disk"), home = base.appendingPathComponent("home")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: home.appendingPathComponent("pgdata"), withDestinationURL: elsewhere)
        let cluster = EmbeddedCluster(home: home)
        defer {
            try? cluster.stop()
            try? FileManager.default.removeItem(at: base)
        }
        XCTAssertEqual(try Connection(url: try cluster.start()).query("select 1").scalar(Int.self), 1)
        XCTAssertTrue(FileManager.default.fileExists(atPath: elsewhere.appendingPathComponent("PG_VERSION").path))
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: home.appendingPathComponent("pgdata").path), elsewhere.path)

        // A link to nothing is named as such.
        let dangling = base.appendingPathComponent("dangling")
        try FileManager.default.createDirectory(at: dangling, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: dangling.appendingPathComponent("pgdata"), withDestinationURL: base.appendingPathComponent("gone"))
        XCTAssertThrowsError(try EmbeddedCluster(home: dangling).start()) { error in
            XCTAssertTrue("\(error)".contains("is a link to \(base.appendingPathComponent("gone").path), which does not exist"), "\(error)")
        }
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
            XCTAssertTrue("\(error)".contains("lacks the embedded cluster's settings"), "\(error)")
        }
    }

    /// libpq reads a comma in a host as a list, a line break would end the setting, and pg_ctl
    /// runs the server through sh -c with the paths in double quotes (where \\ reads as \): such
    /// a home is refused before anything is created.
    func testAHomeWithCharactersThePostgreSQLToolsCannotTakeIsRefused() {
        for character in [",", "\n", "\"", "$", "`", "\\"] {
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("pa\(character)\(UUID().uuidString.prefix(8))")
            XCTAssertThrowsError(try EmbeddedCluster(home: home).start()) { error in
                XCTAssertTrue("\(error)".contains("contains a comma, a double quote, $, `, a backslash or a control character"), "\(error)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: home.path))
        }
    }
}
