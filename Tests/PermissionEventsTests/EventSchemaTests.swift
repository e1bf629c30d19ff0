import Foundation
import PermissionEvents
import TestSupport
import XCTest

/// docs/event.schema.json and the validator describe the same contract.
final class EventSchemaTests: XCTestCase {
    func schema() throws -> JSONValue {
        let url = TestDatabase.packageRoot.appendingPathComponent("docs/event.schema.json")
        return try JSONParser.parse(try String(contentsOf: url, encoding: .utf8), maxDepth: 64)
    }

    func strings(_ value: JSONValue?) -> Set<String> {
        guard case let .array(items)? = value else { return [] }
        return Set(items.compactMap(\.stringValue))
    }

    func testTopLevelFieldsAndRequiredFields() throws {
        let schema = try schema()
        guard case let .object(properties)? = schema["properties"] else { return XCTFail("no properties") }
        XCTAssertEqual(Set(properties.map(\.key)), EventValidator.topLevelFields)
        XCTAssertEqual(schema["additionalProperties"], .bool(false))
        XCTAssertEqual(strings(schema["required"]), ["eventId", "type", "occurredAt", "app", "subject", "platform", "osVersion", "appVersion"])
    }

    func testEnumerationsMatch() throws {
        let properties = try schema()["properties"]
        XCTAssertEqual(strings(properties?["type"]?["enum"]), Set(EventType.allCases.map(\.rawValue)))
        XCTAssertEqual(strings(properties?["platform"]?["enum"]), Set(Platform.allCases.map(\.rawValue)))
        XCTAssertEqual(strings(properties?["permission"]?["enum"]), Set(Permission.allCases.map(\.rawValue)))
    }

    func testLengthLimitsMatch() throws {
        let properties = try schema()["properties"]
        let limits: [(String, Int, Int)] = [("app", 1, 255), ("subject", 1, 128), ("appVersion", 1, 64), ("flow", 1, 64), ("osVersion", 1, 64)]
        for (field, minimum, maximum) in limits {
            XCTAssertEqual(properties?[field]?["minLength"], .number(String(minimum)), field)
            XCTAssertEqual(properties?[field]?["maxLength"], .number(String(maximum)), field)
            // The validator enforces the same bounds.
            let tooLong = EventFixtures.event(overrides: [field: EventFixtures.quoted(String(repeating: "1", count: maximum + 1))])
            guard case let .failure(problem) = EventValidator().validate(line: tooLong) else { XCTFail("\(field) over \(maximum) accepted"); continue }
            XCTAssertEqual(problem.field, field)
        }
    }

    func testEveryTypeSpecificRuleAppearsInTheSchema() throws {
        let text = try String(contentsOf: TestDatabase.packageRoot.appendingPathComponent("docs/event.schema.json"), encoding: .utf8)
        for type in EventType.allCases {
            XCTAssertTrue(text.contains("\"\(type.rawValue)\""), type.rawValue)
            for rule in type.attributes {
                XCTAssertTrue(text.contains("\"\(rule.name)\""), "\(type.rawValue).\(rule.name)")
                if case let .oneOf(choices) = rule.kind {
                    for choice in choices { XCTAssertTrue(text.contains("\"\(choice)\""), "\(rule.name): \(choice)") }
                }
            }
        }
    }

    /// The string rules of the schema (length, pattern, `not`) under a regular expression engine
    /// whose `$` also matches before a final line break (ICU here; Python and Java do the same):
    /// such a line break, or a NUL after osVersion's dot, is still invalid, as the validator says.
    func testStringRulesHoldWhereDollarMatchesBeforeAFinalLineBreak() throws {
        let properties = try schema()["properties"]
        func valid(_ field: String, _ value: String) throws -> Bool {
            let rules = try XCTUnwrap(properties?[field], field)
            func matches(_ pattern: JSONValue?) throws -> Bool {
                guard let pattern = pattern?.stringValue else { return true }
                let regex = try NSRegularExpression(pattern: pattern)
                return regex.firstMatch(in: value, range: NSRange(value.startIndex..., in: value)) != nil
            }
            let length = value.unicodeScalars.count
            if let minimum = rules["minLength"], case let .number(text) = minimum, length < Int(text)! { return false }
            if let maximum = rules["maxLength"], case let .number(text) = maximum, length > Int(text)! { return false }
            return try matches(rules["pattern"]) && !(rules["not"]?["pattern"] != nil && matches(rules["not"]?["pattern"]))
        }
        let samples = [("eventId", "5b0c1f4e-2d7a-4c1b-9a3e-0f6d2b8c7e11"), ("attempt", "0d9e8a52-7b61-4f0e-8a0c-3c5d6e7f8a90"),
                       ("occurredAt", "2026-10-03T09:15:27.120Z"), ("app", "com.example.snap"), ("flow", "backup"),
                       ("osVersion", "14")]
        for (field, value) in samples {
            XCTAssertTrue(try valid(field, value), "\(field) \(value)")
            XCTAssertFalse(try valid(field, value + "\n"), "\(field) \(value) with a final line break")
            XCTAssertNotNil(EventValidator().problem(line: EventFixtures.event(overrides: [field: EventFixtures.quoted(value + "\n")])), field)
        }
        XCTAssertTrue(try valid("osVersion", "17.\n"))  // free text after the dot, as the validator reads it
        XCTAssertNil(EventValidator().problem(line: EventFixtures.event(overrides: ["osVersion": EventFixtures.quoted("17.\n")])))
        XCTAssertFalse(try valid("osVersion", "17.\u{0}"))
    }
}
