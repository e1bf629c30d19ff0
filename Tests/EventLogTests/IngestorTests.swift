import Benchmarks
import EventLog
import Foundation
import PermissionEvents
import Postgres
import TestSupport
import XCTest

final class IngestorTests: DatabaseTestCase {
    var db: Connection!
    var directory: URL!

    override func setUpWithError() throws {
        try super.setUpWithError()
        db = try Connection(url: url)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-ingest-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        db = nil
        try? FileManager.default.removeItem(at: directory)
        super.tearDown()
    }

    func write(_ lines: [String], name: String = "events.ndjson") throws -> String {
        let path = directory.appendingPathComponent(name).path
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func ingestor(_ mode: Ingestor.Mode = .allOrNothing, batchSize: Int = 7) throws -> (Ingestor, LockedList) {
        let ingestor = Ingestor(log: EventLog(connection: try Connection(url: url)))
        ingestor.mode = mode
        ingestor.batchSize = batchSize
        let rejections = LockedList()
        ingestor.onReject = { rejections.append("\($0.line): \($0.reason)") }
        return (ingestor, rejections)
    }

    func count() throws -> Int { try db.query("select count(*) from audit.events").scalar() }

    func testReingestingTheSameFileAppendsNothing() throws {
        let path = try write((0..<50).map { EventFixtures.event(subject: "s\($0 % 4)") })
        let (first, _) = try ingestor()
        XCTAssertEqual(try first.ingest([path]), Ingestor.Summary(appended: 50, duplicates: 0, rejected: 0, lines: 50))
        let (second, _) = try ingestor()
        XCTAssertEqual(try second.ingest([path]), Ingestor.Summary(appended: 0, duplicates: 50, rejected: 0, lines: 50))
        XCTAssertEqual(try count(), 50)
    }

    /// Ingest commits its own transactions: inside a caller's it would commit the caller's work.
    func testIngestRefusesAConnectionInATransaction() throws {
        let path = try write([EventFixtures.event()])
        let connection = try Connection(url: url)
        try connection.execute("begin")
        for mode in [Ingestor.Mode.allOrNothing, .storeValid] {
            let ingestor = Ingestor(log: EventLog(connection: connection))
            ingestor.mode = mode
            XCTAssertThrowsError(try ingestor.ingest([path])) { error in
                XCTAssertTrue("\(error)".contains("the connection is in a transaction"), "\(error)")
            }
            XCTAssertTrue(connection.isInTransaction, "the caller's transaction is left as it was")
        }
        try connection.execute("rollback")
        XCTAssertEqual(try count(), 0)
    }

    func testAllOrNothingStoresNothingAndNamesTheLines() throws {
        var lines = (0..<30).map { _ in EventFixtures.event() }
        lines[3] = "{not json"
        lines[20] = EventFixtures.event(occurredAt: "yesterday")
        lines.append("")  // blank lines are skipped
        let (ingestor, rejections) = try ingestor()
        let summary = try ingestor.ingest([try write(lines)])
        XCTAssertEqual(summary.appended, 0)
        XCTAssertEqual(summary.rejected, 2)
        XCTAssertEqual(rejections.items.count, 2)
        XCTAssertTrue(rejections.items[0].hasPrefix("4: event: malformed JSON"), rejections.items[0])
        XCTAssertTrue(rejections.items[1].hasPrefix("21: occurredAt: "), rejections.items[1])
        XCTAssertEqual(try count(), 0)
    }

    func testConflictWithStoredEventFailsAllOrNothing() throws {
        let id = UUID()
        try EventLog(connection: db).append([EventFixtures.event(id: id)])
        // Installs in reverse order of the lines: the batches are sent by install, and the
        // refusal still names the line.
        var lines = (0..<20).map { i in EventFixtures.event(subject: "inst-\(String(format: "%02d", 20 - i))") }
        lines[12] = EventFixtures.event(id: id, type: "permission.granted", subject: "inst-08")
        let (ingestor, rejections) = try ingestor()
        let summary = try ingestor.ingest([try write(lines)])
        XCTAssertEqual(summary.rejected, 1)
        XCTAssertEqual(summary.appended, 0)
        XCTAssertEqual(rejections.items, ["13: eventId: an event with this id was already stored with different content"])
        XCTAssertEqual(try count(), 1)
    }

    /// Two copies of one id in a file: the first copy counts, as when storing the valid lines,
    /// though the rows are sent by install (here the second copy's install sorts first).
    func testAConflictWithinTheInputNamesTheLaterCopy() throws {
        let id = UUID(), stored = UUID()
        let copies = [EventFixtures.event(id: id, subject: "z-first-copy"), EventFixtures.event(id: id, subject: "a-second-copy")]
        let (ingestor, rejections) = try ingestor()
        XCTAssertEqual(try ingestor.ingest([try write([EventFixtures.event()] + copies)]).rejected, 1)
        // Nothing is stored: the message names the first copy, not a stored event.
        XCTAssertEqual(rejections.items, ["3: eventId: line 2 has this id with different content"])
        XCTAssertEqual(try count(), 0)
        // The log holds the id: a first copy equal to the stored event counts as a duplicate and
        // the later copy is blamed; a first copy that differs is blamed itself.
        let storedEvent = EventFixtures.event(id: stored, subject: "z-stored")
        try EventLog(connection: db).append([storedEvent])
        let same = [storedEvent, EventFixtures.event(id: stored, subject: "a-other")]
        let (again, againRejections) = try self.ingestor()
        _ = try again.ingest([try write(same)])
        XCTAssertEqual(againRejections.items, ["2: eventId: an event with this id was already stored with different content"])
        let differing = [EventFixtures.event(id: stored, subject: "z-other"), EventFixtures.event(id: stored, subject: "a-other")]
        let (third, thirdRejections) = try self.ingestor()
        _ = try third.ingest([try write(differing)])
        XCTAssertEqual(thirdRejections.items, ["1: eventId: an event with this id was already stored with different content",
                                               "2: eventId: an event with this id was already stored with different content"])
        XCTAssertEqual(try count(), 1)
    }

    /// The search for every refused line can end early (here at a lock time-out on an install
    /// another writer holds, after the refused line): the ingest still fails, naming what it found,
    /// and says the search stopped.
    func testARefusalIsNamedWhenTheSearchForOthersEndsEarly() throws {
        let id = UUID()
        try EventLog(connection: db).append([EventFixtures.event(id: id, subject: "a-conflict")])
        let other = try Connection(url: url)
        try other.execute("begin")
        try EventLog(connection: other).append([EventFixtures.event(subject: "p-held")])
        defer { try? other.execute("rollback") }
        let changed = EventFixtures.event(id: id, type: "permission.granted", subject: "a-conflict")
        let ingestor = Ingestor(log: EventLog(connection: try Connection(url: url + "&options=-c%20lock_timeout%3D300")))
        ingestor.batchSize = 1
        let rejections = LockedList()
        ingestor.onReject = { rejections.append("\($0.line): \($0.reason)") }
        let summary = try ingestor.ingest([try write([changed, EventFixtures.event(subject: "p-held")])])
        XCTAssertEqual(summary.rejected, 1)
        XCTAssertEqual(rejections.items, ["1: eventId: an event with this id was already stored with different content"])
        XCTAssertTrue(ingestor.stoppedLookingForRefusals)
        XCTAssertEqual(try count(), 1)
    }

    /// All or nothing, every refused line is named in one run, in input order, whatever the
    /// order the batches were sent in; nothing is stored.
    func testEveryConflictIsNamedInOneRun() throws {
        let stored = (0..<3).map { _ in UUID() }
        let storedEvents = stored.map { EventFixtures.event(id: $0, subject: "stored") }
        try EventLog(connection: db).append(storedEvents)
        let twice = UUID()
        var lines = (0..<2500).map { i in EventFixtures.event(subject: "inst-\(2500 - i)") }
        lines[10] = EventFixtures.event(id: stored[0], type: "permission.granted", subject: "stored")
        lines[1200] = EventFixtures.event(id: twice, subject: "z")
        lines[1900] = storedEvents[1]   // an identical re-send: no error
        lines[2100] = EventFixtures.event(id: twice, subject: "a")
        lines[2400] = EventFixtures.event(id: stored[2], subject: "other")
        let (ingestor, rejections) = try ingestor()
        let summary = try ingestor.ingest([try write(lines)])
        XCTAssertEqual(summary.rejected, 3)
        XCTAssertEqual(summary.appended, 0)
        XCTAssertEqual(rejections.items, ["11: eventId: an event with this id was already stored with different content",
                                          "2101: eventId: line 1201 has this id with different content",
                                          "2401: eventId: an event with this id was already stored with different content"])
        XCTAssertEqual(try count(), 3)
        XCTAssertEqual(try db.query("select count(*) from pg_class where relname like 'permaudit_ingest%'").scalar(Int.self), 0)
    }

    /// All or nothing, the inputs are one transaction that keeps every install's lock. Sent in
    /// line order (batches of one line: z-last, then a-first), it holds z-last while it waits for
    /// a-first, held by a transaction that then waits for z-last: a deadlock. The ingest gives
    /// way first (it waits at most 200 ms on its first try), starts again in the order in which
    /// every call of the write path locks, which cannot deadlock, and stores both.
    func testAllOrNothingTriesAgainInTheWritePathsLockOrderAfterALockWait() throws {
        try EventLog(connection: db).append([EventFixtures.event(subject: "a-first"), EventFixtures.event(subject: "z-last")])
        let path = try write([EventFixtures.event(subject: "z-last"), EventFixtures.event(subject: "a-first")])
        let holder = try Connection(url: url)
        try holder.execute("BEGIN")
        try EventLog(connection: holder).append([EventFixtures.event(subject: "a-first")])
        let ingest = Concurrently.run(on: url) { connection in
            let ingestor = Ingestor(log: EventLog(connection: connection))
            ingestor.batchSize = 1
            return try ingestor.ingest([path])
        }
        try Concurrently.waitForALockWait(db)
        try EventLog(connection: holder).append([EventFixtures.event(subject: "z-last")])
        try holder.execute("COMMIT")
        XCTAssertEqual(try ingest().get(), Ingestor.Summary(appended: 2, duplicates: 0, rejected: 0, lines: 2))
        XCTAssertEqual(try count(), 6)
        // The second try went by install: a-first's event before z-last's.
        let order = try db.query("select s.subject from audit.events e join audit.subject_streams s using (stream_key) order by e.position desc limit 2")
            .decode(String.self)
        XCTAssertEqual(order, ["z-last", "a-first"])
    }

    /// The write path answers 40001 ("run the call again") when an install it waited for was
    /// erased and another writer holds its new stream. All or nothing runs the transaction again
    /// then, in lock order too, and stores the file.
    func testAllOrNothingRunsAgainWhenAnInstallItWaitedForWasErased() throws {
        let x = { EventFixtures.event(subject: "x") }, y = { EventFixtures.event(subject: "y") }
        try EventLog(connection: db).append([x(), y()])
        let h = try Connection(url: url), g = try Connection(url: url)
        try h.execute("BEGIN")
        try EventLog(connection: h).append([x()])
        try g.execute("BEGIN")
        try EventLog(connection: g).append([y()])
        let erasure = Concurrently.run(on: url) { try $0.query("select audit.erase_subject('com.example.app', 'x', 'test')").scalar(Int64?.self) }
        try Concurrently.waitForALockWait(db, backends: 1)
        let path = try write([x(), y()])
        let ingest = Concurrently.run(on: url) { connection in try Ingestor(log: EventLog(connection: connection)).ingest([path]) }
        // Past the first try's 200 ms: the try in lock order waits for x (H).
        try Concurrently.waitForALockWait(db, backends: 2)
        Thread.sleep(forTimeInterval: 0.5)
        try Concurrently.waitForALockWait(db, backends: 2)
        try h.execute("COMMIT")
        XCTAssertNotNil(try erasure().get())  // the ingest now waits for y (G)
        let b = try Connection(url: url)
        try b.execute("BEGIN")
        XCTAssertEqual(try EventLog(connection: b).append([x()]).map(\.status), [.appended], "x re-created by B")
        try g.execute("COMMIT")  // the ingest locks y, then finds x held by B: 40001
        XCTAssertEqual(try EventLog(connection: b).append([y()]).map(\.status), [.appended])
        try b.execute("COMMIT")
        XCTAssertEqual(try ingest().get(), Ingestor.Summary(appended: 2, duplicates: 0, rejected: 0, lines: 2))
    }

    /// Concurrent all-or-nothing ingests of overlapping files in different orders wait for each
    /// other on their first try, and those that wait start again in lock order: every ingest
    /// completes, every event is stored once, every stream's versions are 0..n-1.
    func testConcurrentAllOrNothingIngestsOfOverlappingFilesAllComplete() throws {
        let events = (0..<120).map { i in EventFixtures.event(subject: "inst-\(i % 24)") }
        var random = RandomEvents.Generator(seed: 7)
        let paths = try (0..<4).map { w in
            try write(events.shuffled(using: &random).prefix(90).map { $0 }, name: "w\(w).ndjson")
        }
        let url = self.url
        let ingests = paths.map { path in
            Concurrently.run(on: url) { connection in
                let ingestor = Ingestor(log: EventLog(connection: connection))
                ingestor.batchSize = 5
                return try ingestor.ingest([path]).appended
            }
        }
        let appended = try ingests.map { try $0().get() }
        let stored: Int = try db.query("select count(distinct event_id)::int from audit.events").scalar()
        XCTAssertEqual(appended.reduce(0, +), stored)
        XCTAssertEqual(try count(), stored)
        let gaps: Int = try db.query("""
            select count(*)::int from (select stream_key from audit.events group by stream_key
                                        having min(stream_version) <> 0 or max(stream_version) <> count(*) - 1) s
            """).scalar()
        XCTAssertEqual(gaps, 0)
    }

    /// Without a deadlock, all or nothing appends in input order: positions follow the lines, across
    /// installs and files, as with --rejects.
    func testAllOrNothingAppendsInInputOrder() throws {
        let a = try write((0..<6).map { i in EventFixtures.event(subject: "inst-\(["m", "b", "z"][i % 3])") }, name: "a.ndjson")
        let b = try write((0..<4).map { i in EventFixtures.event(subject: "inst-\(["y", "a"][i % 2])") }, name: "b.ndjson")
        let (ingestor, _) = try ingestor(.allOrNothing, batchSize: 4)
        XCTAssertEqual(try ingestor.ingest([a, b]).appended, 10)
        let expected = try [a, b].flatMap { try String(contentsOfFile: $0, encoding: .utf8).split(separator: "\n").map { line in
            try JSONParser.parse(String(line))["eventId"]!.stringValue!
        } }
        XCTAssertEqual(try db.query("select payload->>'eventId' from audit.events order by position").decode(String.self), expected)
    }

    /// The writer role, which reads no table, can ingest all or nothing (its temporary table).
    func testTheWriterRoleIngests() throws {
        let writer = Ingestor(log: EventLog(connection: try Connection(url: url + "&options=-c%20role%3Dpermaudit_writer")))
        let path = try write((0..<5).map { i in EventFixtures.event(subject: "w-\(i % 2)") })
        XCTAssertEqual(try writer.ingest([path]), Ingestor.Summary(appended: 5, duplicates: 0, rejected: 0, lines: 5))
        XCTAssertEqual(try writer.ingest([path]), Ingestor.Summary(appended: 0, duplicates: 5, rejected: 0, lines: 5))
    }

    /// The valid lines pass through COPY's text format: backslashes, tabs and carriage returns
    /// (JSON whitespace, and escapes in strings) arrive as they were.
    func testLinesWithBackslashesAndTabsArriveIntact() throws {
        let event = EventFixtures.event(overrides: ["attributes": "{\"note\":\"a\\\\b\\tc\\r\\n\",\t\"permanent\":true}"])
            .replacingOccurrences(of: ",\"type\"", with: ",\t\r \"type\"")
        for mode in [Ingestor.Mode.allOrNothing, .storeValid] {
            let url = try TestDatabase.create()
            defer { TestDatabase.drop(url) }
            let ingestor = Ingestor(log: EventLog(connection: try Connection(url: url)))
            ingestor.mode = mode
            XCTAssertEqual(try ingestor.ingest([try write([event])]).appended, 1, "\(mode)")
            let note = try Connection(url: url).query("select payload->'attributes'->>'note' from audit.events").scalar(String.self)
            XCTAssertEqual(note, "a\\b\tc\r\n", "\(mode)")
        }
    }

    func testRejectsModeStoresTheValidLines() throws {
        let id = UUID()
        let stored = EventFixtures.event(id: id)
        try EventLog(connection: db).append([stored])
        var lines = (0..<40).map { _ in EventFixtures.event() }
        lines[5] = EventFixtures.event(overrides: ["platform": "\"windows\""])
        lines[17] = EventFixtures.event(id: id, type: "permission.granted")  // conflict found by the database
        lines[18] = stored                                                  // an identical re-send
        let (ingestor, rejections) = try ingestor(.storeValid)
        let summary = try ingestor.ingest([try write(lines)])
        XCTAssertEqual(summary, Ingestor.Summary(appended: 37, duplicates: 1, rejected: 2, lines: 40))
        XCTAssertEqual(rejections.items.map { $0.split(separator: ":").first! }, ["6", "18"])
        XCTAssertEqual(try count(), 38)
        // The intake counts: the duplicate (by the write path) and the two refused events (by the
        // ingestor), under their day and app; "windows" is no platform, so it is not kept.
        let anomalies = try db.query("""
            select day::text, app, coalesce(platform, '-'), sum(duplicates)::int, sum(rejected)::int
              from audit.intake_anomalies group by 1, 2, 3 order by 3
            """).decode((String, String, String, Int, Int).self)
        XCTAssertEqual(anomalies.map { "\($0.0) \($0.1) \($0.2) \($0.3) \($0.4)" },
                       ["2026-10-03 com.example.app - 0 1", "2026-10-03 com.example.app android 1 1"])
    }

    func testLongLinesAreRejectedWithoutReadingThemWhole() throws {
        let huge = "{\"eventId\":\"" + String(repeating: "x", count: 300_000) + "\"}"
        let path = try write([EventFixtures.event(), huge, EventFixtures.event()])
        let (ingestor, rejections) = try ingestor(.storeValid)
        let summary = try ingestor.ingest([path])
        XCTAssertEqual(summary.appended, 2)
        XCTAssertEqual(rejections.items, ["2: event: line longer than 256 KiB, not read (an event is at most 16 KiB of JSON)"])
    }

    func testManyFilesAndLastLineWithoutNewline() throws {
        let a = try write((0..<10).map { _ in EventFixtures.event() }, name: "a.ndjson")
        let b = directory.appendingPathComponent("b.ndjson").path
        try ((0..<3).map { _ in EventFixtures.event() }.joined(separator: "\n")).write(toFile: b, atomically: true, encoding: .utf8)
        let (ingestor, _) = try ingestor()
        XCTAssertEqual(try ingestor.ingest([a, b]).appended, 13)
    }
}

/// Ingest streams: the client's memory does not grow with the input.
final class IngestMemoryTests: XCTestCase {
    func testMemoryStaysFlatAsTheInputGrows() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-memory-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var generator = SyntheticEvents(seed: 99)
        func file(_ name: String, lines: Int) throws -> String {
            let path = directory.appendingPathComponent(name).path
            var text = ""
            for _ in 0..<lines { text += generator.next().json + "\n" }
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        let small = try file("small.ndjson", lines: 10_000)
        let large = try file("large.ndjson", lines: 60_000)
        let ingest = { (path: String) throws -> Ingestor.Summary in
            try Ingestor(log: EventLog(connection: try Connection(url: url))).ingest([path])
        }
        XCTAssertEqual(try ingest(small).appended, 10_000)
        let afterSmall = currentResidentMiB()
        XCTAssertEqual(try ingest(large).appended, 60_000)
        let afterLarge = currentResidentMiB()
        // Six times the input, and the resident memory grows by far less than the file (~25 MiB).
        XCTAssertLessThan(afterLarge - afterSmall, 10, "resident \(afterSmall) MiB -> \(afterLarge) MiB")
    }
}
