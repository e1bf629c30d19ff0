import Benchmarks
import EventLog
import Foundation
import PermissionEvents
import Postgres
import TestSupport
import XCTest

final class AppendTests: DatabaseTestCase {
    var db: Connection!
    var log: EventLog!

    override func setUpWithError() throws {
        try super.setUpWithError()
        db = try Connection(url: url)
        log = EventLog(connection: db)
    }

    override func tearDown() {
        db = nil
        log = nil
        super.tearDown()
    }

    func count() throws -> Int { try db.query("select count(*) from audit.events").scalar() }

    /// The database's rule walk on one event: "field: rule", nil when it is valid.
    func databaseProblem(_ json: String) throws -> String? {
        try db.query("select audit.event_problem($1::jsonb)", [json]).scalar(String?.self)
    }

    /// Runs `body` for `writers` writers at once, each on its own connection with its own random
    /// generator (seeded `seed + writer`); the errors they met.
    func concurrentWriters(_ writers: Int, seed: UInt64,
                           _ body: @escaping @Sendable (EventLog, inout RandomEvents.Generator) throws -> Void) -> [String] {
        let url = self.url
        let failures = LockedList()
        _ = try? concurrently(writers) { writer in
            do {
                var generator = RandomEvents.Generator(seed: seed + UInt64(writer))
                try body(EventLog(connection: try Connection(url: url)), &generator)
            } catch {
                failures.append("writer \(writer): \(error)")
            }
        }
        return failures.items
    }

    /// Streams whose versions are not exactly 0..n-1.
    func streamsWithGaps() throws -> Int {
        try db.query("""
            select count(*) from (
                select stream_key, count(*) as n, max(stream_version) as top, min(stream_version) as bottom
                  from audit.events group by stream_key) s
             where bottom <> 0 or top <> n - 1
            """).scalar()
    }

    func testAppendAssignsPositionsAndContiguousStreamVersions() throws {
        let events = (0..<5).map { i in EventFixtures.event(subject: i % 2 == 0 ? "inst-a" : "inst-b") }
        let results = try log.append(events)
        XCTAssertEqual(results.map(\.status), Array(repeating: .appended, count: 5))
        XCTAssertEqual(results.compactMap(\.position), results.compactMap(\.position).sorted())
        let versions = try db.query("""
            select array_agg(stream_version order by position)::text
              from audit.events group by stream_key order by min(position)
            """).column(as: String.self)
        XCTAssertEqual(versions, ["{0,1,2}", "{0,1}"])
        // The raw subject is held by the link table only.
        XCTAssertEqual(try db.query("select count(*) from audit.events where payload::text like '%inst-a%'").scalar(Int.self), 0)
        XCTAssertEqual(try db.query("select count(*) from audit.subject_streams").scalar(Int.self), 2)
    }

    /// The log keeps microseconds: a longer fraction is cut, not rounded, so that a time keeps
    /// its UTC date (an attempt's day) on the one-event path and the batch path alike.
    func testOccurredAtIsTruncatedToTheMicrosecond() throws {
        let times = ["2026-10-05T23:59:59.9999996Z", "2026-10-05T21:59:59.123456789-02:00", "2026-10-05T12:00:00.5Z"]
        let beforeMidnight = EventFixtures.event(occurredAt: times[0])
        try log.append([beforeMidnight])
        try log.append(times.dropFirst().map { EventFixtures.event(occurredAt: $0) })
        let stored = try db.query("""
            select to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') from audit.events order by position
            """).column(as: String.self)
        XCTAssertEqual(stored, ["2026-10-05 23:59:59.999999", "2026-10-05 23:59:59.123456", "2026-10-05 12:00:00.500000"])
        // A duplicate is counted on the same day.
        XCTAssertEqual(try log.append([beforeMidnight]).map(\.status), [.duplicate])
        XCTAssertEqual(try db.query("select day::text from audit.intake_anomalies where duplicates > 0").column(as: String.self), ["2026-10-05"])
    }

    func testIdenticalResendIsDuplicateAndDifferentContentIsConflict() throws {
        let id = UUID()
        let event = EventFixtures.event(id: id)
        XCTAssertEqual(try log.append([event]).first?.status, .appended)
        let again = try log.append([event, event])
        XCTAssertEqual(again.map(\.status), [.duplicate, .duplicate])
        XCTAssertEqual(again.map(\.position), [nil, nil])
        // Key order and whitespace do not make content different (jsonb equality).
        let reordered = try log.append([" " + event.replacingOccurrences(of: ",", with: " , ")])
        XCTAssertEqual(reordered.first?.status, .duplicate)

        XCTAssertThrowsError(try log.append([EventFixtures.event(id: id, occurredAt: "2026-10-03T09:15:28Z")])) { error in
            guard let error = error as? AppendError else { return XCTFail("\(error)") }
            XCTAssertEqual(error.kind, .conflict)
            XCTAssertEqual(error.index, 0)
            XCTAssertTrue(error.reason.hasPrefix("eventId: "), error.reason)
        }
        // Same id, same content, other install: a conflict too.
        XCTAssertThrowsError(try log.append([EventFixtures.event(id: id, subject: "inst-other")]))
        // A conflict inside one batch.
        let other = UUID()
        XCTAssertThrowsError(try log.append([EventFixtures.event(id: other), EventFixtures.event(id: other, type: "permission.granted")])) { error in
            XCTAssertEqual((error as? AppendError)?.index, 1)
        }
        XCTAssertEqual(try count(), 1)
    }

    func testEveryDefectIsRejectedByTheDatabaseNamingFieldAndRule() throws {
        try log.append([EventFixtures.event()])
        for defect in EventFixtures.defects {
            let batch = [EventFixtures.event(), defect.json]
            XCTAssertThrowsError(try log.append(batch), defect.name) { error in
                guard let error = error as? AppendError else { return XCTFail("\(defect.name): \(error)") }
                XCTAssertEqual(error.kind, .invalidEvent, defect.name)
                XCTAssertEqual(error.index, 1, defect.name)
                XCTAssertTrue(error.reason.hasPrefix(defect.field + ": "), "\(defect.name): \(error.reason)")
                XCTAssertFalse(error.underlying.description.contains("inst-1"), "errors never quote the payload")
            }
        }
        XCTAssertEqual(try count(), 1, "nothing stored from a rejected batch")
    }

    func testSwiftAndSQLValidatorsAgree() throws {
        let validator = EventValidator()
        for defect in EventFixtures.defects where defect.name != "not an object" {
            let swift = validator.validate(line: defect.json)
            let sql = try databaseProblem(defect.json)
            guard case let .failure(problem) = swift else { XCTFail("\(defect.name): Swift accepted"); continue }
            XCTAssertEqual(sql, problem.description, defect.name)
        }
        for type in EventType.allCases {
            XCTAssertNil(try databaseProblem(EventFixtures.event(type: type.rawValue)), type.rawValue)
        }
        // Integer attributes are decided on the decimal digits (a Double reads 0.99999999999999999999 as 1).
        for (count, valid) in [("3.0", true), ("1e2", true), ("20e-1", true), ("0.99999999999999999999", false), ("1.0000000000000001", false),
                               ("2147483647", true), ("2147483648", false), ("1e400", false), ("-0", false), ("0e5", false)] {
            let json = EventFixtures.event(type: "picker.completed", overrides: ["attributes": "{\"selectedCount\":\(count)}"])
            let problem = valid ? nil : "attributes.selectedCount: must be an integer from 1 to 2147483647"
            XCTAssertEqual(validator.problem(line: json), problem, count)
            XCTAssertEqual(try databaseProblem(json), problem, count)
        }
        // osVersion: osMajor is the integer before the first '.', whatever follows it.
        let badVersion = "osVersion: must match a major version of 1-9 digits, then a dot or the end, e.g. 17.4.1 or 14"
        for (version, problem) in [("17.4.1-beta", nil), ("17.4.1 (21E236)", nil), ("14", nil), ("17.", nil), ("1.\u{0301}", nil), ("14 beta", badVersion),
                                   (".5", badVersion), ("1234567890.1", badVersion), ("", "osVersion: must be 1-64 characters")] {
            let json = EventFixtures.event(overrides: ["osVersion": "\"\(version)\""])
            XCTAssertEqual(validator.problem(line: json), problem, version)
            XCTAssertEqual(try databaseProblem(json), problem, version)
        }
    }

    /// Cases where the Swift validator once judged differently from the database: a combining mark
    /// after the e-mail shape's `@` or dot, a repeated key whose earlier value breaks a rule (the
    /// last value counts), integers written with exponents beyond ±1000, numeric's exponent limit.
    func testSwiftAndSQLAgreeOnMarksRepeatedKeysAndExponents() throws {
        let validator = EventValidator()
        let email = "subject: must be a pseudonymous install id, not an e-mail address"
        let deep = String(repeating: "[", count: 15) + String(repeating: "]", count: 15)
        let integer = "attributes.selectedCount: must be an integer from 1 to 2147483647"
        let cases: [(name: String, json: String, problem: String?)] = [
            ("mark after @", EventFixtures.event(overrides: ["subject": "\"user@\u{0301}example.com\""]), email),
            ("mark after a dot", EventFixtures.event(overrides: ["subject": "\"a@b.\u{FE0F}com\""]), email),
            ("repeated experiment", EventFixtures.event(overrides: ["experiments": "{\"priming\":1,\"priming\":\"treatment\"}"]), nil),
            ("repeated deep attribute", EventFixtures.event(overrides: ["attributes": "{\"x\":\(deep),\"x\":1}"]), nil),
            ("deep attribute", EventFixtures.event(overrides: ["attributes": "{\"x\":\(deep)}"]), "event: nesting deeper than 16 levels"),
            ("1.5 with a long exponent", EventFixtures.event(type: "picker.completed", overrides:
                ["attributes": "{\"selectedCount\":15\(String(repeating: "0", count: 1000))e-1001}"]), integer),
            ("15 with a long exponent", EventFixtures.event(type: "picker.completed", overrides:
                ["attributes": "{\"selectedCount\":0.\(String(repeating: "0", count: 1000))15e1002}"]), nil),
            ("zero at numeric's largest exponent", EventFixtures.event(overrides: ["attributes": "{\"x\":0e1073741822}"]), nil),
        ]
        for test in cases {
            XCTAssertEqual(validator.problem(line: test.json), test.problem, test.name)
            XCTAssertEqual(try databaseProblem(test.json), test.problem, test.name)
        }
        // Thousands of levels: over the size limit in the write path too (031; the jsonpath walk
        // that measures the size ran out of stack), as in the Swift validator.
        let deepest = EventFixtures.event(overrides: ["attributes": "{\"x\":\(String(repeating: "[", count: 12_000) + String(repeating: "]", count: 12_000))}"])
        XCTAssertEqual(validator.problem(line: deepest), "event: nesting deeper than 16 levels")
        XCTAssertThrowsError(try log.append([deepest])) { error in
            XCTAssertEqual((error as? AppendError)?.reason, "event: must be at most 16 KiB of JSON", "\(error)")
        }
        // One past it numeric cannot hold (the database refuses the text: 22003, before any rule).
        let overflow = EventFixtures.event(overrides: ["attributes": "{\"x\":0e1073741823}"])
        XCTAssertEqual(validator.problem(line: overflow), "event: must be at most 16 KiB of JSON")
        XCTAssertThrowsError(try databaseProblem(overflow)) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "22003", "\(error)")
        }
    }

    /// RFC 3339's fraction has no upper bound: a long one passes both validators and the write
    /// path (a cast to timestamptz refuses a text of more than 128 characters), and the stored
    /// time is cut to the microsecond.
    func testAFractionOfAnyLengthIsStoredToTheMicrosecond() throws {
        let validator = EventValidator()
        for (digits, offset) in [(10, "Z"), (200, "Z"), (200, "-03:30")] {
            let time = "2026-10-03T23:59:59." + String(repeating: "9", count: digits) + offset
            let json = EventFixtures.event(occurredAt: time)
            XCTAssertNil(validator.problem(line: json), time)
            XCTAssertNil(try databaseProblem(json), time)
            let position = try XCTUnwrap(try log.append([json]).first?.position, time)
            let stored: String = try db.query("""
                select to_char(occurred_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') from audit.events where position = $1
                """, [position]).scalar()
            XCTAssertEqual(stored, offset == "Z" ? "2026-10-03 23:59:59.999999" : "2026-10-04 03:29:59.999999", time)
        }
    }

    /// "At most 16 KiB of JSON", measured as compact JSON: 16,384 bytes pass, 16,385 do not, in the
    /// Swift validator, in the database's rule walk and through the write path alike. The Swift
    /// validator also measures the event as sent, whitespace included, where it has the text.
    func testTheSizeLimitIsSixteenKiBOfJSON() throws {
        let validator = EventValidator()
        for (bytes, problem) in [(16_384, nil), (16_385, "event: must be at most 16 KiB of JSON")] {
            let json = EventFixtures.padded(compactBytes: bytes)
            XCTAssertEqual(json.utf8.count, bytes)
            XCTAssertEqual(validator.problem(line: json), problem, "\(bytes) bytes")
            XCTAssertEqual(try databaseProblem(json), problem, "\(bytes) bytes")
            if problem == nil {
                XCTAssertEqual(try log.append([json]).first?.status, .appended)
            } else {
                XCTAssertThrowsError(try log.append([json]))
            }
        }
        // Sent with whitespace: 16,384 bytes as sent pass, 16,385 do not, though compact they are
        // shorter; the whitespace around the event is not part of it. The database, which
        // receives jsonb, measures the compact form only.
        let spacedLimit = EventFixtures.padded(compactBytes: 16_284, spaces: 100)
        let spacedOver = EventFixtures.padded(compactBytes: 16_284, spaces: 101)
        XCTAssertEqual([spacedLimit.utf8.count, spacedOver.utf8.count], [16_384, 16_385])
        XCTAssertNil(validator.problem(line: "  " + spacedLimit + " \t"))
        XCTAssertEqual(validator.problem(line: spacedOver), "event: must be at most 16 KiB of JSON")
        XCTAssertNil(try databaseProblem(spacedOver))
        // Numbers as numeric prints them: 1e400 is stored (401 digits), 1e20000 is over the limit.
        for (number, problem) in [("1e400", nil), ("1e20000", "event: must be at most 16 KiB of JSON")] {
            let json = EventFixtures.event(overrides: ["attributes": "{\"permanent\":false,\"big\":\(number)}"])
            XCTAssertEqual(validator.problem(line: json), problem, number)
            XCTAssertEqual(try databaseProblem(json), problem, number)
        }
        // The same length in both, for values with nesting, empty containers, escapes, non-ASCII
        // text, repeated keys (compared as bytes, as jsonb does: é and e + U+0301 are two keys)
        // and numbers in every notation, written with and without whitespace.
        for text in ["{}", "[]", "{\"a\": [1, [2, {}], []], \"b\": {\"c\": null}}", "{\"s\": \"t\\\"ab\\u0001\\n é 😀\"}",
                     " { \"k\" : 1 , \"k\" : [ true , false ] } ", "[{\"x\":{\"y\":{\"z\":[1.50,-2e3,0.001e2,100e-2,-0,1.0E+2,-1e-2,0e1000000000,0e-16383]}}}]",
                     "{\"\u{E9}\": 1, \"e\u{301}\": 2}"] {
            let swift = try JSONParser.parse(text).compactTextLength
            XCTAssertEqual(try db.query("select audit.compact_json_length($1::jsonb)", [text]).scalar(), swift, text)
        }
    }

    /// A key the client chose is named as written only when it is 1-64 printable ASCII
    /// characters; otherwise by its length, so that no error carries a line break, an escape
    /// sequence or a long copy of the payload. The same in Swift and in the database.
    func testErrorsNameUnprintableKeysByTheirLengthOnly() throws {
        let validator = EventValidator()
        let long = String(repeating: "k", count: 5000)
        for (json, problem) in [
            (EventFixtures.event(overrides: ["SUBJECT s-1: x": "1"]), "SUBJECT s-1: x: unknown field"),
            (EventFixtures.event(overrides: ["forged\\n7: fake": "1"]), "<14-character key>: unknown field"),
            (EventFixtures.event(overrides: ["esc\\u001b[31m": "1"]), "<8-character key>: unknown field"),
            (EventFixtures.event(overrides: [long: "1"]), "<5000-character key>: unknown field"),
            (EventFixtures.event(overrides: ["\u{E9}t\u{E9}": "1"]), "<3-character key>: unknown field"),
            (EventFixtures.event(overrides: ["experiments": "{\"ok\":1}"]), "experiments.ok: must be a string"),
            (EventFixtures.event(overrides: ["experiments": "{\"a\\nb\":\"\"}"]), "experiments.<3-character key>: must be 1-64 characters"),
        ] {
            XCTAssertEqual(validator.problem(line: json), problem, problem)
            XCTAssertEqual(try databaseProblem(json), problem, problem)
        }
        // A NUL under an attribute key: only Swift can report it (jsonb refuses the text).
        let nul = EventFixtures.event(overrides: ["attributes": "{\"x\\n9: y\":\"a\\u0000\",\"ok\":{\"k\":\"\\u0000\"}}"])
        XCTAssertEqual(validator.problem(line: nul), "attributes.<6-character key>: must not contain a NUL character")
        let nested = EventFixtures.event(overrides: ["attributes": "{\"ok\":{\"k\":\"\\u0000\"}}"])
        XCTAssertEqual(validator.problem(line: nested), "attributes.ok.k: must not contain a NUL character")
    }

    func testMalformedInputToTheWritePath() throws {
        XCTAssertThrowsError(try log.append(jsonArray: "{\"not\":\"an array\"}")) { error in
            XCTAssertEqual((error as? AppendError)?.kind, .invalidEvent)
        }
        XCTAssertThrowsError(try log.append(jsonArray: "[{\"a\":\"\\u0000\"}]")) { error in
            // PostgreSQL refuses NUL in jsonb before the function runs.
            XCTAssertNotNil(error as? PostgresError)
        }
        XCTAssertEqual(try log.append(jsonArray: "[]"), [])

        // Each element of append([String]) is one event: an empty text, or two objects joined by
        // a comma (which the joined array would take as two events), is refused at its index.
        let a = EventFixtures.event(), b = EventFixtures.event()
        // So is one whose braces and brackets do not pair up by kind ("{]", "{\"a\":[1}}"), which
        // the joined array would fail to parse as a whole, with no index.
        for (events, index) in [([""], 0), ([a + "," + b], 0), ([a, " "], 1), ([a, "[" + b + "]"], 1), ([a, b + " x"], 1),
                                (["{]"], 0), ([a, "{\"a\":[1}}"], 1), ([a, "{\"a\":{\"b\":[1]]}"], 1)] {
            XCTAssertThrowsError(try log.append(events)) { error in
                XCTAssertEqual((error as? AppendError)?.kind, .invalidEvent)
                XCTAssertEqual((error as? AppendError)?.index, index)
                XCTAssertEqual((error as? AppendError)?.reason, "event: must be one JSON object")
            }
        }
        XCTAssertEqual(try count(), 0)
        // Whitespace around an object, and braces or quotes inside its strings, are not refused
        // here: the second event reaches the write path, which names its own rule.
        XCTAssertThrowsError(try log.append([" \n" + a + "\t", "{\"x\": \"}{\\\"\"}"])) { error in
            XCTAssertEqual((error as? AppendError)?.index, 1)
            XCTAssertNotEqual((error as? AppendError)?.reason, "event: must be one JSON object")
        }
    }

    /// JSONValue's equality is jsonb's, which decides duplicate against conflict.
    func testJSONValueEqualityIsJsonbEquality() throws {
        let pairs = [
            ("1", "1.0"), ("1", "1.00000000000000000001"), ("9007199254740993", "9007199254740992"),
            ("100", "1e2"), ("0.05", "5E-2"), ("-0", "0"), ("0.0", "-0e5"), ("10", "1"), ("-1", "1"),
            ("1e400", "1e400"), ("12.50", "1.25e1"),
            ("\"\u{E9}\"", "\"e\u{301}\""), ("\"\\u00e9\"", "\"\u{E9}\""),
            ("{\"\u{212A}\": 1}", "{\"K\": 1}"), ("{\"a\": 1, \"b\": [1, 2]}", "{\"b\": [1, 2.0], \"a\": 1}"),
            ("[1, 2]", "[2, 1]"), ("{\"a\": null}", "{}"), ("true", "1"),
        ]
        for (left, right) in pairs {
            let jsonb = try db.query("select $1::jsonb = $2::jsonb", [left, right]).scalar(Bool.self)
            XCTAssertEqual(try JSONParser.parse(left) == JSONParser.parse(right), jsonb, "\(left) vs \(right)")
        }
    }

    func testSQLLookingStringsAreStoredAsData() throws {
        let nasty = "x'); drop table audit.events; --"
        let json = EventFixtures.event(subject: nasty, overrides: ["attributes": "{\"note\":\"'; delete from audit.events; --\"}"])
        XCTAssertEqual(try log.append([json]).first?.status, .appended)
        XCTAssertEqual(try db.query("select subject from audit.subject_streams").scalar(String.self), nasty)
        XCTAssertEqual(try db.query("select payload->'attributes'->>'note' from audit.events").scalar(String.self), "'; delete from audit.events; --")
    }

    /// A commit that appended wakes the projector, unless an append notified in the last 50 ms
    /// (039; the follower then looks again soon: ProjectorTests).
    func testACommitThatAppendedWakesTheProjector() throws {
        let listener = try Connection(url: url)
        try listener.listen("permaudit_events")
        let event = EventFixtures.event()
        try log.append([event])  // notified with the call's commit
        XCTAssertNotNil(try listener.waitForNotification(timeout: 5))
        try log.append([event])  // a duplicate appends nothing: no wake-up
        XCTAssertNil(try listener.waitForNotification(timeout: 0.3))
        // More than 50 ms after the last notification: with the caller's commit.
        try db.transaction { try log.append([EventFixtures.event(), EventFixtures.event()]) }
        XCTAssertNotNil(try listener.waitForNotification(timeout: 5))
        XCTAssertEqual(try count(), 3)
    }

    /// Appends 2000 events of 2000 new installs in one transaction, 500 per call, as an
    /// all-or-nothing ingest does: the log's rows its calls read by scanning the log, and the
    /// probes of the event-id index (this transaction's counts: pg_stat_get_xact_*).
    func appendInOneTransaction() throws -> (scannedRows: Int, probes: Int) {
        let events = (0..<2000).map { EventFixtures.event(subject: "install-\($0)") }
        let counts = """
            select pg_stat_get_xact_tuples_returned('audit.events'::regclass),
                   pg_stat_get_xact_numscans('audit.events_event_id_key'::regclass)
            """
        try db.execute("begin")
        let before = try db.query(counts).decode((Int, Int).self)[0]
        for start in stride(from: 0, to: events.count, by: 500) {
            XCTAssertEqual(try log.append(Array(events[start..<start + 500])).filter { $0.status == .appended }.count, 500)
        }
        let after = try db.query(counts).decode((Int, Int).self)[0]
        try db.execute("commit")
        XCTAssertEqual(try count(), 2000)
        return (after.0 - before.0, after.1 - before.1)
    }

    /// The statistics of a log vacuumed after a transaction that appended and rolled back (a
    /// killed ingest) say: pages, and no rows on them, however many the next transaction adds.
    /// Its calls must keep probing the indexes (040). Before, each call read its batch again for
    /// every link row, looking every event id up once per link: 2.5 million probes here.
    func testOneTransactionGrowingALogWhoseStatisticsSayNoRowsKeepsProbingTheIndexes() throws {
        try db.execute("begin")
        _ = try log.append((0..<2000).map { _ in EventFixtures.event(subject: "install-\(UUID())") })
        try db.execute("rollback")
        try db.execute("vacuum (truncate false) audit.events, audit.subject_streams")
        XCTAssertEqual(try db.query("""
            select count(*) from pg_class
             where oid in ('audit.events'::regclass, 'audit.subject_streams'::regclass) and reltuples = 0 and relpages > 0
            """).scalar(Int.self), 2)
        let (scannedRows, probes) = try appendInOneTransaction()
        XCTAssertLessThan(scannedRows, 2000)
        XCTAssertLessThan(probes, 20_000, "each event id is looked up a few times, not once per link")
    }

    /// A log vacuumed while empty: the check on new links (035) was planned in the first call,
    /// on an empty log, as a scan of the log, and kept that plan for the session, scanning the
    /// log once per new install in every later call (040).
    func testOneTransactionGrowingALogVacuumedWhileEmptyKeepsProbingTheIndexes() throws {
        try db.execute("vacuum audit.events, audit.subject_streams")
        let (scannedRows, probes) = try appendInOneTransaction()
        XCTAssertLessThan(scannedRows, 2000, "the log's rows read by scanning it")
        XCTAssertLessThan(probes, 20_000)
    }

    /// A caller whose session reads backslashes in literals as escapes (041): the write path's
    /// patterns are still patterns.
    func testACallerWithoutStandardStringsGetsTheSameRules() throws {
        try db.execute("set standard_conforming_strings = off")
        let fine = EventFixtures.event(occurredAt: "2026-10-03T09:15:27.1234567Z")
        XCTAssertEqual(try log.append([fine]).first?.status, .appended)
        XCTAssertEqual(try db.query("select to_char(occurred_at at time zone 'UTC', 'SS.US') from audit.events").scalar(String.self), "27.123456")
        XCTAssertThrowsError(try log.append([EventFixtures.event(overrides: ["osVersion": "\"17x4\""])])) { error in
            XCTAssertTrue("\(error)".contains("osVersion:"), "\(error)")
        }
    }

    /// A logical dump restored into another cluster holds transaction ids that cluster has not
    /// reached: appends wait for the counter (042) instead of being read out of committed order.
    func testAppendsAreRefusedWhileTheTransactionCounterIsBehindTheLog() throws {
        try log.append([EventFixtures.event(subject: "a")])
        // The ordinary case the check must let through: a transaction that took its id before a
        // later one appended and committed.
        let early = try Connection(url: url)
        try early.execute("begin; select pg_current_xact_id()")
        try log.append([EventFixtures.event(subject: "b")])
        try EventLog(connection: early).append([EventFixtures.event(subject: "c")])
        try early.execute("commit")
        // Nor a transaction that appends twice while no other ends (its own rows are the newest
        // it sees, with an id at the snapshot's xmax): an all-or-nothing ingest.
        try db.transaction {
            try log.append([EventFixtures.event(subject: "d")])
            try log.append([EventFixtures.event(subject: "e")])
        }

        try TestDatabase.addAnEventAheadOfTheTransactionCounter(db)
        XCTAssertThrowsError(try log.append([EventFixtures.event(subject: "f")])) { error in
            let error = error as? PostgresError
            XCTAssertEqual(error?.code, .transactionCounterBehind)
            XCTAssertTrue(error?.message.contains("is behind the log") ?? false, error?.message ?? "")
            XCTAssertTrue(error?.message.contains("Restoring a logical dump") ?? false)
        }
        XCTAssertEqual(try count(), 6)
    }

    func testExpectedVersion() throws {
        let first = try log.append([EventFixtures.event(subject: "s")], expectedVersion: -1)
        XCTAssertEqual(first.first?.status, .appended)
        _ = try log.append([EventFixtures.event(subject: "s"), EventFixtures.event(subject: "s")], expectedVersion: 0)
        XCTAssertThrowsError(try log.append([EventFixtures.event(subject: "s")], expectedVersion: 0)) { error in
            guard let error = error as? AppendError else { return XCTFail("\(error)") }
            XCTAssertEqual(error.kind, .wrongExpectedVersion)
            XCTAssertEqual(error.underlying.code.rawValue, "PA003")
        }
        XCTAssertThrowsError(try log.append([EventFixtures.event(subject: "s"), EventFixtures.event(subject: "t")], expectedVersion: 2)) { error in
            XCTAssertEqual((error as? AppendError)?.kind, .invalidEvent)
        }
        XCTAssertEqual(try log.append([EventFixtures.event(subject: "s")], expectedVersion: 2).first?.status, .appended)
    }

    /// A writer (who reads no table) learns the version to expect from the database.
    func testStreamVersionIsTheExpectedVersionOfTheNextAppend() throws {
        try db.execute("set role permaudit_writer")
        defer { try? db.execute("reset role") }
        XCTAssertEqual(try log.streamVersion(app: "com.example.app", subject: "v"), -1)
        try log.append([EventFixtures.event(subject: "v"), EventFixtures.event(subject: "v"), EventFixtures.event(subject: "w")])
        let version = try log.streamVersion(app: "com.example.app", subject: "v")
        XCTAssertEqual(version, 1)
        XCTAssertEqual(try log.streamVersion(app: "com.example.other", subject: "v"), -1, "a stream is (app, subject)")
        XCTAssertEqual(try log.append([EventFixtures.event(subject: "v")], expectedVersion: version).first?.status, .appended)
        XCTAssertEqual(try log.streamVersion(app: "com.example.app", subject: "v"), 2)
    }

    func testTheLogIsImmutableForEveryRoleAndInReplicaMode() throws {
        try log.append([EventFixtures.event()])
        for statement in ["update audit.events set type = 'x'", "delete from audit.events", "truncate audit.events"] {
            XCTAssertThrowsError(try db.execute(statement), statement) { error in
                XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA010", statement)
            }
            XCTAssertThrowsError(try db.execute("set session_replication_role = replica; \(statement)"), statement)
            try db.execute("reset session_replication_role")
        }
        XCTAssertEqual(try count(), 1)
    }

    func testConcurrentWritersWithOverlappingBatches() throws {
        // 8 writers, each appending 20 batches of 25 events drawn from a shared pool of 300 ids
        // over 10 installs: every event stored once, every stream contiguous, no error surfaced.
        let pool = (0..<300).map { i in EventFixtures.event(id: UUID(), subject: "inst-\(i % 10)") }
        let failures = concurrentWriters(8, seed: 1) { log, generator in
            for _ in 0..<20 {
                let batch = (0..<25).map { _ in pool[Int.random(in: 0..<pool.count, using: &generator)] }
                _ = try log.append(batch)
            }
            _ = try log.append(pool)  // and finally everything, so all ids are stored
        }
        XCTAssertEqual(failures, [])
        XCTAssertEqual(try count(), 300)
        XCTAssertEqual(try streamsWithGaps(), 0)
        XCTAssertEqual(try db.query("select count(*) from audit.subject_streams s where not exists (select from audit.events e where e.stream_key = s.stream_key)").scalar(Int.self), 0)
    }

    func testConcurrentSingleEventAppendsToNewAndSharedInstalls() throws {
        // The one-event path: 8 writers append single events from a pool of 120 over 4 installs
        // that do not exist yet, each id several times: stored once, streams contiguous, no error.
        let pool = (0..<120).map { i in EventFixtures.event(id: UUID(), subject: "solo-\(i % 4)") }
        let failures = concurrentWriters(8, seed: 100) { log, generator in
            for _ in 0..<60 { _ = try log.append([pool[Int.random(in: 0..<pool.count, using: &generator)]]) }
            for event in pool { _ = try log.append([event]) }
        }
        XCTAssertEqual(failures, [])
        XCTAssertEqual(try count(), 120)
        XCTAssertEqual(try db.query("select count(*) from audit.subject_streams").scalar(Int.self), 4)
        XCTAssertEqual(try streamsWithGaps(), 0)
    }
}

/// A list shared by concurrent test workers; a lock guards every access.
final class LockedList: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [String] = []
    func append(_ item: String) { lock.lock(); storage.append(item); lock.unlock() }
    var items: [String] { lock.lock(); defer { lock.unlock() }; return storage }
}
