import Foundation
import PermissionEvents
import Postgres
import TestSupport
import XCTest

/// `audit.event_is_valid` (migration 015) lets the write path skip the rule walk of
/// `audit.event_problem` for events it clears. It may send a valid event to the rule walk, but it
/// must never clear an invalid one: checked over every defect class and a grid of edge values for
/// every field of every event type.
final class QuickCheckTests: DatabaseTestCase {
    var db: Connection!

    override func setUpWithError() throws {
        try super.setUpWithError()
        db = try Connection(url: url)
    }

    override func tearDown() {
        db = nil
        super.tearDown()
    }

    struct Verdicts { var cleared = 0, valid = 0, unsound: [String] = [] }

    /// Both functions over every event, in one statement.
    func verdicts(_ events: [String]) throws -> Verdicts {
        let rows = try db.query("""
            select audit.event_is_valid(x.e), audit.event_problem(x.e) is null, x.e::text
              from jsonb_array_elements($1::jsonb) as x(e)
            """, ["[" + events.joined(separator: ",") + "]"])
        var verdicts = Verdicts()
        for (cleared, valid, event) in try rows.decode((Bool, Bool, String).self) {
            if cleared { verdicts.cleared += 1 }
            if valid { verdicts.valid += 1 }
            if cleared && !valid { verdicts.unsound.append(event) }
        }
        return verdicts
    }

    func testOrdinaryEventsAreClearedAndDefectsAreNot() throws {
        let ordinary = EventType.allCases.map { EventFixtures.event(type: $0.rawValue) }
        XCTAssertEqual(try verdicts(ordinary).cleared, ordinary.count)
        let defects = EventFixtures.defects.map(\.json).filter { $0.hasPrefix("{") }
        let verdicts = try verdicts(defects)
        XCTAssertEqual(verdicts.cleared, 0, verdicts.unsound.joined(separator: "\n"))
        XCTAssertEqual(verdicts.valid, 0)
    }

    /// Every field of every event type (on Android and on iOS) set to each of a list of edge
    /// values, or removed.
    static func gridEvents() -> [String] {
        let q = EventFixtures.quoted
        let ahead = { ISO8601DateFormatter().string(from: Date().addingTimeInterval($0)) }
        let strings = ["\"\"", "\"x\"", "42", "4.2", "true", "null", "{}", "[]", "[\"x\"]", q("a@b.co"), q("a@b"),
                       q(String(repeating: "a", count: 32)), q(String(repeating: "a", count: 33)),
                       q(String(repeating: "a", count: 64)), q(String(repeating: "a", count: 65)),
                       q(String(repeating: "é", count: 128)), q(String(repeating: "é", count: 129)),
                       q(String(repeating: "a", count: 255)), q(String(repeating: "a", count: 256)),
                       q("17"), q("17.4.1"), q("17..1"), q(".1"), q("1."), q("1234567890.1"), q("123456789.1"), q("17.a"),
                       q("com.example_app-1"), q("com.example app"), q("com.example/app"), q("émoji 🙂"), q("x'); drop table audit.events; --"),
                       q("ios"), q("android"), q("iOS"), q("picker.opened"), q("permission.maybe"),
                       q("1.\u{0301}"), q("17.\u{200D}"), q("e\u{0301}"), q("\u{E9}"), q("🇫🇷"), q("\u{FEFF}x"), q("x\\u0041y")]
        let uuids = [q("0b6f2c3e-7a41-4c55-9d2a-6f1e8b3c9a10"), q("0B6F2C3E-7A41-4C55-9D2A-6F1E8B3C9A10"),
                     q("0b6f2c3e7a414c559d2a6f1e8b3c9a10"), q("0b6f2c3e-7a41-4c55-9d2a-6f1e8b3c9a1"),
                     q("0b6f2c3e-7a41-4c55-9d2a-6f1e8b3c9a100"), q("0b6f2c3e7-a41-4c55-9d2a-6f1e8b3c9a10"),
                     q("0b6f2c3e-7a41-4c55-9d2a-6f1e8b3c9a1g"), q("0b6f2c3e-7a41-4c55-9d2a-6f1e8b3c9-10"),
                     q("{0b6f2c3e-7a41-4c55-9d2a-6f1e8b3c9a1}"), q("------------------------------------")]
        let times = ["2024-02-29T00:00:00Z", "2026-02-29T00:00:00Z", "2026-02-28T23:59:59Z", "2026-02-30T00:00:00Z",
                     "2026-04-30T12:00:00Z", "2026-04-31T12:00:00Z", "2026-12-31T23:59:59Z", "2026-13-01T00:00:00Z",
                     "2026-00-10T00:00:00Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "2026-10-03T24:00:00Z",
                     "2026-10-03T23:60:00Z", "2026-10-03T23:59:60Z", "2026-10-03T09:15:27.123456789Z",
                     "2026-10-03T09:15:27.1234567890Z", "2026-10-03T09:15:27.Z", "2026-10-03T09:15:27+15:59",
                     "2026-10-03T09:15:27+16:00", "2026-10-03T09:15:27-00:00", "2026-10-03T09:15:27+01:60",
                     "2026-10-03t09:15:27z", "2026-10-03T09:15:27", "2026-10-03 09:15:27Z", "2026-10-03T9:15:27Z",
                     "26-10-03T09:15:27Z", "12026-10-03T09:15:27Z", "2999-01-01T00:00:00Z", "2026-10-03T09:15:27+0100",
                     "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "2026-09-31T00:00:00Z",
                     // 10 minutes inside and past the 24 hours a client clock may be ahead
                     ahead(86_400 - 600), ahead(86_400 + 600)].map(q)
        let counts = ["0", "1", "-1", "1.5", "1.0", "1e3", "999999999", "1000000000", "2147483647", "2147483648",
                      "\"2\"", "true", "null"]
        let experiments = ["{}", "{\"\":\"x\"}", "{\"a\":\"\"}", "{\"a\":1}", "{\"a\":null}", "[]", "\"x\"",
                           "{\"\(String(repeating: "k", count: 64))\":\"v\"}", "{\"\(String(repeating: "k", count: 65))\":\"v\"}",
                           "{\"k\":\"\(String(repeating: "v", count: 64))\"}", "{\"k\":\"\(String(repeating: "v", count: 65))\"}", "{\"a\":\"x\",\"b\":\"y\"}", "{\"a\":{\"b\":\"c\"}}",
                           // keys an error must not print as written (018), and one it may
                           "{\"a\\nb\":1}", "{\"a\\u001b[31mb\":\"\"}", "{\"\(String(repeating: "é", count: 3))\":1}", "{\"ok key: x\":1}"]
        var attributes = ["{}", "[]", "\"x\"", "null", "{\"x\":{\"y\":1}}", "{\"x\":[1]}", "{\"note\":\"kept\"}",
                          String(repeating: "{\"a\":", count: 17) + "1" + String(repeating: "}", count: 17)]
        for picker in [q("phpicker"), q("androidPhotoPicker"), q("androidOpenDocument"), q("camera"), "1"] {
            attributes.append("{\"picker\":\(picker)}")
        }
        for count in counts {
            attributes += ["{\"picker\":\"phpicker\",\"selectionLimit\":\(count)}", "{\"selectedCount\":\(count)}",
                           "{\"trigger\":\"app\",\"selectedCount\":\(count)}"]
        }
        for value in [q("app"), q("system"), q("settings"), q("user"), "true"] { attributes.append("{\"trigger\":\(value)}") }
        for value in [q("notDetermined"), q("granted"), q("limited"), q("denied"), q("restricted"), q("unknown"), "1"] {
            attributes.append("{\"status\":\(value)}")
        }
        for value in [q("onboarding"), "1", "true", "false", "null", q("true")] {
            attributes += ["{\"screen\":\(value)}", "{\"dialogShown\":\(value)}", "{\"permanent\":\(value)}"]
        }
        let permissions = ["ios.photos.readWrite", "ios.photos.addOnly", "android.READ_MEDIA_IMAGES", "android.READ_MEDIA_VIDEO",
                           "android.READ_MEDIA_VISUAL_USER_SELECTED", "android.READ_EXTERNAL_STORAGE",
                           "android.WRITE_EXTERNAL_STORAGE", "android.CAMERA", "ios.photos"].map(q) + ["1", "null"]
        let candidates: [String: [String]] = [
            "eventId": uuids + strings, "attempt": uuids + strings, "type": strings + EventType.allCases.map { q($0.rawValue) },
            "occurredAt": times + strings, "app": strings, "subject": strings, "platform": strings, "osVersion": strings,
            "appVersion": strings, "flow": strings, "permission": permissions + strings, "experiments": experiments,
            "attributes": attributes, "unknownField": ["1"],
            // unknown fields whose names an error must not print as written (018), and one it may
            "line\\nbreak": ["1"], "esc\\u001b[31mred": ["1"], String(repeating: "u", count: 65): ["1"], "SUBJECT s-1: x": ["1"],
        ]
        // around the size limit, in bytes of compact JSON
        var events = [16_383, 16_384, 16_385, 16_400].map { EventFixtures.padded(compactBytes: $0) }
        for type in EventType.allCases {
            for (field, values) in candidates {
                events.append(EventFixtures.event(type: type.rawValue, removing: [field]))
                for value in values {
                    events.append(EventFixtures.event(type: type.rawValue, overrides: [field: value]))
                    // The same on iOS, where the permissions differ.
                    var ios = ["platform": q("ios"), "osVersion": q("17.4")]
                    if !type.rawValue.hasPrefix("picker.") { ios["permission"] = q("ios.photos.readWrite") }
                    ios[field] = value
                    events.append(EventFixtures.event(type: type.rawValue, overrides: ios))
                }
            }
        }
        return events
    }

    /// Both SQL checks take the server's time: exactly 24 h ahead of it is allowed, a
    /// millisecond more is not.
    func testTheFutureLimitIsExactlyTwentyFourHours() throws {
        let server = "2026-10-02T09:15:27.120Z"
        func verdicts(_ occurredAt: String) throws -> (problem: String?, cleared: Bool) {
            let event = EventFixtures.event(occurredAt: occurredAt)
            let row = try db.query("select audit.event_problem($1::jsonb, $2::timestamptz), audit.event_is_valid($1::jsonb, $2::timestamptz)",
                                   [event, server])
            return (try row.value(0, 0, as: String?.self), try row.value(0, 1, as: Bool.self))
        }
        XCTAssertNil(try verdicts("2026-10-03T09:15:27.120Z").problem)
        for ahead in ["2026-10-03T09:15:27.121Z", "2026-10-03T11:15:27.120+01:00", "2026-10-03T15:15:27Z"] {
            let (problem, cleared) = try verdicts(ahead)
            XCTAssertEqual(problem, "occurredAt: must not be more than 24 h after server time", ahead)
            XCTAssertFalse(cleared, ahead)
        }
    }

    func testTheQuickCheckNeverClearsAnInvalidEvent() throws {
        let events = Self.gridEvents()
        var total = Verdicts()
        for chunk in stride(from: 0, to: events.count, by: 2000) {
            let verdicts = try verdicts(Array(events[chunk..<min(chunk + 2000, events.count)]))
            total.cleared += verdicts.cleared
            total.valid += verdicts.valid
            total.unsound += verdicts.unsound
        }
        XCTAssertEqual(total.unsound, [], "cleared by audit.event_is_valid, refused by audit.event_problem")
        // The grid exercises both sides: many valid events, most of them cleared cheaply.
        XCTAssertGreaterThan(total.valid, events.count / 4)
        XCTAssertGreaterThan(total.cleared, total.valid * 3 / 4)
    }

    /// The Swift validator (what `ingest`, `append` and the collector run first) gives the same
    /// answer as the database's rule walk, message included, for every event of the grid.
    func testTheSwiftValidatorAgreesWithTheDatabaseOnTheGrid() throws {
        let events = Self.gridEvents()
        let validator = EventValidator()
        var disagreements: [String] = []
        for chunk in stride(from: 0, to: events.count, by: 2000) {
            let slice = Array(events[chunk..<min(chunk + 2000, events.count)])
            let database = try db.query("""
                select audit.event_problem(x.e) from jsonb_array_elements($1::jsonb) with ordinality as x(e, n) order by x.n
                """, ["[" + slice.joined(separator: ",") + "]"]).column(as: String?.self)
            for (event, problem) in zip(slice, database) {
                let swift = validator.problem(line: event)
                if swift != problem { disagreements.append("\(event)\n  Swift: \(swift ?? "valid")\n  SQL:   \(problem ?? "valid")") }
            }
        }
        XCTAssertEqual(disagreements.count, 0, disagreements.prefix(10).joined(separator: "\n"))
    }
}
