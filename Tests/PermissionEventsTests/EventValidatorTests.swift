import Foundation
import PermissionEvents
import TestSupport
import XCTest

final class EventValidatorTests: XCTestCase {
    let validator = EventValidator()

    func testSampleEventsAreValid() throws {
        let path = TestDatabase.packageRoot.deletingLastPathComponent().appendingPathComponent("shared/examples/sample-events.ndjson")
        let text = try String(contentsOf: path, encoding: .utf8)
        var count = 0
        for (number, line) in text.split(separator: "\n").enumerated() {
            if case let .failure(problem) = validator.validate(line: String(line)) {
                XCTFail("line \(number + 1): \(problem)")
            }
            count += 1
        }
        XCTAssertGreaterThan(count, 100)
    }

    func testFixtureIsValid() {
        for type in EventType.allCases {
            let json = EventFixtures.event(type: type.rawValue)
            if case let .failure(problem) = validator.validate(line: json) { XCTFail("\(type): \(problem)") }
        }
    }

    func testEveryDefectClassNamesFieldAndRule() {
        for defect in EventFixtures.defects {
            switch validator.validate(line: defect.json) {
            case .success: XCTFail("\(defect.name): accepted")
            case let .failure(problem):
                XCTAssertEqual(problem.field, defect.field, "\(defect.name): \(problem)")
                XCTAssertFalse(problem.rule.isEmpty)
            }
        }
    }

    func testMalformedJSONInvalidUTF8AndNUL() {
        for text in ["{", "{\"a\":}", "{\"a\":1,}", "nul", "{\"a\":01}", "{\"a\":\"\\x\"}", "{} {}", "{\"a\":\"\\ud800\"}"] {
            guard case let .failure(problem) = validator.validate(line: text) else { return XCTFail("accepted \(text)") }
            XCTAssertEqual(problem.field, "event")
            XCTAssertTrue(problem.rule.hasPrefix("malformed JSON"), problem.rule)
        }
        let invalidUTF8: [UInt8] = Array("{\"eventId\":\"".utf8) + [0xC3, 0x28] + Array("\"}".utf8)
        let parsed = invalidUTF8.withUnsafeBufferPointer { try? JSONParser.parse(bytes: $0) }
        XCTAssertNil(parsed)
        do {
            _ = try invalidUTF8.withUnsafeBufferPointer { try JSONParser.parse(bytes: $0) }
        } catch let error as JSONSyntaxError {
            XCTAssertEqual(error.reason, "invalid UTF-8")
            XCTAssertEqual(error.offset, 12)
        } catch { XCTFail("\(error)") }
        let nul = EventFixtures.event(overrides: ["flow": "\"a\\u0000b\""])
        guard case let .failure(problem) = validator.validate(line: nul) else { return XCTFail("NUL accepted") }
        XCTAssertEqual(problem.description, "flow: must not contain a NUL character")
    }

    func testSQLLookingStringsAreJustData() {
        let json = EventFixtures.event(subject: "x'); drop table audit.events; --", overrides: ["attributes": "{\"note\":\"' or 1=1 --\"}"])
        guard case let .success(event) = validator.validate(line: json) else { return XCTFail("rejected") }
        XCTAssertEqual(event.subject, "x'); drop table audit.events; --")
    }

    func testFutureSkewBoundary() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let strict = EventValidator(now: now)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions.insert(.withFractionalSeconds)
        let inside = EventFixtures.event(occurredAt: formatter.string(from: now.addingTimeInterval(24 * 3600)))
        let outside = EventFixtures.event(occurredAt: formatter.string(from: now.addingTimeInterval(24 * 3600 + 0.001)))
        if case .failure = strict.validate(line: inside) { XCTFail("exactly 24 h ahead rejected") }
        if case .success = strict.validate(line: outside) { XCTFail("24 h and 1 ms ahead accepted") }
    }

    func testOsMajorAndDimensions() {
        let json = EventFixtures.event(overrides: ["osVersion": "\"17.4.1\"", "platform": "\"ios\"", "permission": "\"ios.photos.readWrite\""])
        guard case let .success(event) = validator.validate(line: json) else { return XCTFail("rejected") }
        XCTAssertEqual(event.osMajor, 17)
        XCTAssertEqual(event.platform, .ios)
        XCTAssertEqual(event.permission, .iosReadWrite)
        XCTAssertEqual(event.experiments, [ExperimentAssignment(experiment: "priming-2026", variant: "treatment")])
    }

    /// Keys equal as Swift strings but not byte for byte are two experiments, as in `jsonb`.
    func testCanonicallyEquivalentExperimentKeysStayApart() {
        let json = EventFixtures.event(overrides: ["experiments": "{\"caf\u{E9}\":\"a\",\"cafe\u{301}\":\"b\",\"x\":\"c\"}"])
        guard case let .success(event) = validator.validate(line: json) else { return XCTFail("rejected") }
        XCTAssertEqual(event.experiments.map(\.variant), ["c", "a", "b"], "jsonb order: shorter keys first, then bytes")
        XCTAssertEqual(event.experiments.map { Array($0.experiment.utf8) }, [Array("x".utf8), Array("caf\u{E9}".utf8), Array("cafe\u{301}".utf8)])
    }

    /// RFC 3339's fraction is one digit or more, with no upper bound.
    func testAFractionOfAnyLength() {
        for fraction in ["1", "123456789", "1234567890", String(repeating: "9", count: 40)] {
            XCTAssertNil(validator.problem(line: EventFixtures.event(occurredAt: "2026-10-03T23:59:59.\(fraction)Z")), fraction)
        }
        XCTAssertEqual(validator.problem(line: EventFixtures.event(occurredAt: "2026-10-03T23:59:59.Z")),
                       "occurredAt: must be an RFC 3339 timestamp with an offset, e.g. 2026-10-03T09:15:27.120Z")
    }

    /// Each element's bytes as sent, as the collector measures them.
    func testSizedParseMeasuresTheValueAndEachElementAsSent() throws {
        var text = " [ {\"a\": 1} ,[ ],\"x\" ] \n"
        let sized = try text.withUTF8 { try JSONParser.parseSized(bytes: $0) }
        XCTAssertEqual(sized.sentLength, 21)
        XCTAssertEqual(sized.elementSentLengths, [8, 3, 3])
    }

    func testCompactTextLengthIgnoresWhitespaceAndDroppedKeys() throws {
        // Written with spaces and a repeated key; compact, as jsonb keeps it: {"a":[1,2,3],"b":{"c":"x\"y","d":[],"e":{}}}
        let value = try JSONParser.parse(" { \"b\" : {\"c\":\"x\\\"y\", \"d\": [ ], \"e\": { } }, \"a\":[1, 2], \"a\": [1,2,3] } ")
        XCTAssertEqual(value.compactTextLength, "{\"a\":[1,2,3],\"b\":{\"c\":\"x\\\"y\",\"d\":[],\"e\":{}}}".utf8.count)
    }

    /// An exponent of Int.min trapped in the size rule (abs overflowed) and ended the process
    /// (ingest, append, the collector); it is over the size limit like any exponent numeric refuses.
    func testAnExponentOfIntMinIsOverTheSizeLimit() throws {
        for number in ["1e-9223372036854775808", "1e9223372036854775807", "1e-1073741823"] {
            let event = EventFixtures.event(overrides: ["attributes": #"{"n": \#(number)}"#])
            guard case .failure(let problem) = EventValidator().validate(bytes: Array(event.utf8)) else {
                return XCTFail("\(number): accepted")
            }
            XCTAssertTrue("\(problem)".contains("event: must be at most 16 KiB of JSON"), "\(number): \(problem)")
        }
    }
}
