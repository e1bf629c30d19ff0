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
}
