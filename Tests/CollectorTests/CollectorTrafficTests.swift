import Collector
import EventLog
import Foundation
import MicroHTTP
import PermissionEvents
import Postgres
import TestSupport
import XCTest

/// Traffic over time: a database restart under load, and the 60 s load test from a second process.
final class CollectorTrafficTests: XCTestCase {
    /// Posts batches of `size` new events from `clients` threads until `stop` is set; each batch is
    /// acknowledged (200) or not (any other answer, or no answer).
    final class Traffic: @unchecked Sendable {
        // @unchecked Sendable: all state is guarded by `lock`.
        private let lock = NSLock()
        private(set) var statuses: [Int: Int] = [:]
        private(set) var acknowledged: [UUID] = []
        private(set) var unacknowledged: [[String]] = []
        private(set) var limited: [UUID] = []
        private var stopping = false
        var stop: Bool {
            get { lock.lock(); defer { lock.unlock() }; return stopping }
            set { lock.lock(); stopping = newValue; lock.unlock() }
        }

        func record(_ status: Int, _ ids: [UUID], _ events: [String]) {
            lock.lock()
            defer { lock.unlock() }
            statuses[status, default: 0] += 1
            if status == 200 { acknowledged += ids } else { unacknowledged.append(events) }
            if status == 429 { limited += ids }
        }

        func count(_ status: Int) -> Int { lock.lock(); defer { lock.unlock() }; return statuses[status] ?? 0 }

        /// Runs the clients on their own threads; returns a group to wait on.
        func run(port: UInt16, clients: Int, size: Int, keys: [String], app: String) -> DispatchGroup {
            let group = DispatchGroup()
            for c in 0..<clients {
                group.enter()
                Thread {
                    defer { group.leave() }
                    var client = try? HTTPClient(port: port, timeout: 60)
                    var n = 0
                    while !self.stop {
                        n += 1
                        let ids = (0..<size).map { _ in UUID() }
                        let events = ids.enumerated().map { EventFixtures.event(id: $1, subject: "inst-\(c)-\((n + $0) % 11)", app: app) }
                        do {
                            if client == nil { client = try HTTPClient(port: port, timeout: 60) }
                            let response = try CollectorTests.post(client!, events, key: keys[c % keys.count])
                            self.record(response.status, ids, events)
                        } catch {
                            client = nil
                            self.record(0, ids, events)
                            Thread.sleep(forTimeInterval: 0.05)
                        }
                    }
                }.start()
            }
            return group
        }
    }

    /// Every id in `ids` is stored exactly once, and the log holds `total` events in all.
    static func assertStoredOnce(_ ids: [UUID], total: Int, url: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let db = try Connection(url: url)
        let found = try db.query("select count(*)::int, count(distinct event_id)::int from audit.events where event_id = any($1::uuid[])",
                                 ["{" + ids.map { $0.uuidString.lowercased() }.joined(separator: ",") + "}"]).decode((Int, Int).self)[0]
        XCTAssertEqual(found.0, ids.count, "every acknowledged event is stored", file: file, line: line)
        XCTAssertEqual(found.1, ids.count, "none twice", file: file, line: line)
        let all: Int = try db.query("select count(*)::int from audit.events").scalar()
        XCTAssertEqual(all, total, file: file, line: line)
    }

    /// The database stops and starts again under traffic (a cluster of its own, so that the shared
    /// test cluster is not disturbed): answers are 200 or 503 with Retry-After, the collector
    /// recovers, no acknowledged event is lost, none is stored twice, and re-sending the refused
    /// batches stores each of their events once.
    func testDatabaseRestartDuringTraffic() throws {
        let home = URL(fileURLWithPath: TestDatabase.home.path + "-restart")
        try? FileManager.default.removeItem(at: home)
        let cluster = EmbeddedCluster(home: home)
        defer {
            try? cluster.stop()
            try? FileManager.default.removeItem(at: home)
        }
        let url = try cluster.start()
        try Migrator(directory: TestDatabase.sqlDirectory).migrate(try Connection(url: url))
        let key = try APIKeys.create(app: CollectorTests.app, on: try Connection(url: url)).key
        var configuration = CollectorConfiguration(databaseURL: url, requiredMigrations: CollectorTests.migrations)
        configuration.port = 0
        configuration.databaseConnections = 2
        configuration.rateLimit = 0
        let logged = LoggedLines()
        configuration.log = { logged.append($0) }
        let collector = try Collector(configuration)
        defer { collector.stop() }

        let traffic = Traffic()
        let done = traffic.run(port: collector.port, clients: 4, size: 10, keys: [key], app: CollectorTests.app)
        let monitor = try HTTPClient(port: collector.port)
        func waitFor(_ condition: () -> Bool) {
            let deadline = Date().addingTimeInterval(60)
            while !condition(), Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        }
        waitFor { traffic.count(200) >= 20 }
        try cluster.stop()
        waitFor { traffic.count(503) >= 5 }
        XCTAssertEqual(try monitor.send("GET", "/readyz").status, 503)
        XCTAssertEqual(try monitor.send("GET", "/healthz").status, 200, "the process keeps running")
        let okBeforeRestart = traffic.count(200)
        try cluster.start()
        waitFor { traffic.count(200) >= okBeforeRestart + 20 }
        traffic.stop = true
        done.wait()

        XCTAssertEqual(Set(traffic.statuses.keys), [200, 503], "\(traffic.statuses)")
        XCTAssertGreaterThanOrEqual(traffic.count(200), okBeforeRestart + 20, "recovered after the restart")
        XCTAssertEqual(try monitor.send("GET", "/readyz").status, 200)
        // A line when the database went away and one when it came back, not one per refused request
        // (a writer that committed just before the stop may report "available" once more).
        let states = logged.lines.filter { $0.hasPrefix("collector: the database is") }
        XCTAssertTrue(states.first?.hasPrefix("collector: the database is unavailable (") ?? false, "\(states)")
        XCTAssertEqual(states.last, "collector: the database is available again")
        XCTAssertLessThanOrEqual(states.count, 4, "\(states)")
        let stored: Int = try Connection(url: url).query("select count(*)::int from audit.events").scalar()
        XCTAssertGreaterThanOrEqual(stored, traffic.acknowledged.count)
        try Self.assertStoredOnce(traffic.acknowledged, total: stored, url: url)

        // The client's retry of every refused batch: each event ends up stored exactly once.
        let client = try HTTPClient(port: collector.port)
        var everything = traffic.acknowledged
        for events in traffic.unacknowledged {
            let response = try CollectorTests.post(client, events, key: key)
            XCTAssertEqual(response.status, 200)
            XCTAssertTrue(try CollectorTests.results(response).allSatisfy { $0.status == "appended" || $0.status == "duplicate" })
            everything += events.map { UUID(uuidString: String(try! JSONParser.parse($0)["eventId"]!.stringValue!))! }
        }
        try Self.assertStoredOnce(everything, total: everything.count, url: url)
    }

    /// `permaudit serve` in its own process, driven for 60 s ($PERMAUDIT_LOAD_SECONDS) by 8
    /// keep-alive clients posting batches of 50 new events as fast as they are answered. Two keys:
    /// one shared by six clients, under a rate limit it may exceed. Only 200 and 429 may come back,
    /// every acknowledged event is stored exactly once, and nothing of a 429 batch is stored.
    func testLoadFromASecondProcess() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let keys = try ["com.example.app", "com.example.app"].map { app in
            try APIKeys.create(app: app, on: try Connection(url: url)).key
        }
        let port = try Self.freePort()
        let server = Process()
        server.executableURL = TestDatabase.permauditBinary
        server.arguments = ["serve", "--listen", "127.0.0.1:\(port)", "--threads", "4", "--connections", "4",
                            "--rate-limit", "100", "--burst", "100", "--database-url", url]
        server.currentDirectoryURL = TestDatabase.packageRoot
        let log = Pipe()
        server.standardError = log
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        var ready = false
        for _ in 0..<300 where !ready {
            ready = (try? HTTPClient(port: port).send("GET", "/healthz").status) == 200
            if !ready { Thread.sleep(forTimeInterval: 0.1) }
        }
        XCTAssertTrue(ready, "the collector answers /healthz")

        let seconds = Double(ProcessInfo.processInfo.environment["PERMAUDIT_LOAD_SECONDS"] ?? "") ?? 60
        let traffic = Traffic()
        let started = Date()
        let done = traffic.run(port: port, clients: 8, size: 50, keys: [keys[0], keys[0], keys[0], keys[1]], app: "com.example.app")
        Thread.sleep(forTimeInterval: seconds)
        traffic.stop = true
        done.wait()
        let elapsed = Date().timeIntervalSince(started)

        server.terminate()  // SIGTERM: answers what is in flight, then exits 0
        server.waitUntilExit()
        XCTAssertEqual(server.terminationStatus, 0, String(decoding: log.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        XCTAssertTrue(Set(traffic.statuses.keys).isSubset(of: [200, 429]), "\(traffic.statuses)")
        XCTAssertGreaterThan(traffic.count(200), 0)
        try Self.assertStoredOnce(traffic.acknowledged, total: traffic.acknowledged.count, url: url)
        print(String(format: "load: %.0f s, %d acknowledged events (%.0f/s), statuses %@", elapsed, traffic.acknowledged.count,
                     Double(traffic.acknowledged.count) / elapsed, "\(traffic.statuses.sorted { $0.key < $1.key })"))
    }

    /// A port nothing listens on now (the kernel's pick for port 0).
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw PortError(errno: errno) }
        return UInt16(bigEndian: address.sin_port)
    }
}

/// The kernel gave no loopback port: the test cannot run its server, which is a failure.
struct PortError: Error, CustomStringConvertible {
    var errno: Int32
    var description: String { "cannot bind a loopback port: \(String(cString: strerror(errno)))" }
}

/// What a collector logged, from any thread.
final class LoggedLines: @unchecked Sendable {
    // @unchecked Sendable: `all` is touched only under the lock.
    private let lock = NSLock()
    private var all: [String] = []
    func append(_ line: String) { lock.withLock { all.append(line) } }
    var lines: [String] { lock.withLock { all } }
}
