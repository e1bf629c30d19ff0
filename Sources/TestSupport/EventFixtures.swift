import Foundation
import PermissionEvents

/// Valid wire-format events for tests, as JSON text, with fields overridable.
public enum EventFixtures {
    /// A valid `permission.denied` event on Android; `overrides` replace or add top-level fields
    /// (values are raw JSON text), `removing` drops fields.
    public static func event(
        id: UUID = UUID(), type: String = "permission.denied", subject: String = "inst-1", app: String = "com.example.app",
        occurredAt: String = "2026-10-03T09:15:27.120Z", attempt: UUID? = UUID(),
        overrides: [String: String] = [:], removing: Set<String> = []
    ) -> String {
        var fields: [(String, String)] = [
            ("eventId", quoted(id.uuidString.lowercased())),
            ("type", quoted(type)),
            ("occurredAt", quoted(occurredAt)),
            ("app", quoted(app)),
            ("subject", quoted(subject)),
            ("platform", quoted("android")),
            ("osVersion", quoted("14")),
            ("appVersion", quoted("5.2.0")),
        ]
        if let attempt { fields.append(("attempt", quoted(attempt.uuidString.lowercased()))) }
        if !type.hasPrefix("picker.") { fields.append(("permission", quoted("android.READ_MEDIA_IMAGES"))) }
        fields.append(("flow", quoted("backup")))
        fields.append(("experiments", "{\"priming-2026\":\"treatment\"}"))
        switch type {
        case "permission.denied": fields.append(("attributes", "{\"permanent\":false}"))
        case "picker.opened": fields.append(("attributes", "{\"picker\":\"androidPhotoPicker\",\"selectionLimit\":1}"))
        case "picker.completed": fields.append(("attributes", "{\"selectedCount\":2}"))
        case "limitedSelection.changed": fields.append(("attributes", "{\"trigger\":\"app\"}"))
        case "permission.statusObserved": fields.append(("attributes", "{\"status\":\"granted\"}"))
        default: break
        }
        for (key, value) in overrides {
            if let index = fields.firstIndex(where: { $0.0 == key }) { fields[index].1 = value } else { fields.append((key, value)) }
        }
        fields.removeAll { removing.contains($0.0) }
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    public static func quoted(_ text: String) -> String {
        var out = ""
        JSONValue.writeQuoted(text, to: &out)
        return out
    }

    /// A valid event of `compactBytes` bytes of compact JSON (a `note` attribute pads it), sent
    /// with `spaces` spaces after its opening brace (JSON allows whitespace between tokens).
    public static func padded(compactBytes: Int, spaces: Int = 0, id: UUID = UUID(), app: String = "com.example.app") -> String {
        func withNote(_ note: String) -> String {
            event(id: id, app: app, overrides: ["attributes": "{\"permanent\":false,\"note\":\"\(note)\"}"])
        }
        let json = withNote(String(repeating: "x", count: compactBytes - withNote("").utf8.count))
        return "{" + String(repeating: " ", count: spaces) + json.dropFirst()
    }

    /// Invalid events, one per defect class of the contract, with the field the error must name.
    public static var defects: [(name: String, json: String, field: String)] {
        let future = ISO8601DateFormatter().string(from: Date().addingTimeInterval(3 * 86_400))
        return [
            ("not an object", "[1,2]", "event"),
            ("wrong JSON type", event(overrides: ["app": "42"]), "app"),
            ("unknown type", event(overrides: ["type": quoted("permission.maybe")]), "type"),
            ("missing eventId", event(removing: ["eventId"]), "eventId"),
            ("bad eventId", event(overrides: ["eventId": quoted("not-a-uuid")]), "eventId"),
            ("bad timestamp", event(occurredAt: "2026-10-03 09:15:27"), "occurredAt"),
            ("timestamp without offset", event(occurredAt: "2026-10-03T09:15:27"), "occurredAt"),
            ("impossible date", event(occurredAt: "2026-02-30T09:15:27Z"), "occurredAt"),
            ("future timestamp", event(occurredAt: future), "occurredAt"),
            ("platform/permission mismatch", event(overrides: ["permission": quoted("ios.photos.readWrite")]), "permission"),
            ("unknown permission", event(overrides: ["permission": quoted("android.CAMERA")]), "permission"),
            ("missing permission", event(removing: ["permission"]), "permission"),
            ("permission on a picker event", event(type: "picker.cancelled", overrides: ["permission": quoted("android.READ_MEDIA_IMAGES")]), "permission"),
            ("missing attempt", event(attempt: nil), "attempt"),
            ("missing type-specific attribute", event(type: "picker.completed", overrides: ["attributes": "{}"]), "attributes.selectedCount"),
            ("wrong attribute type", event(type: "picker.completed", overrides: ["attributes": "{\"selectedCount\":\"2\"}"]), "attributes.selectedCount"),
            ("attribute below minimum", event(type: "picker.completed", overrides: ["attributes": "{\"selectedCount\":0}"]), "attributes.selectedCount"),
            ("bad enum attribute", event(type: "picker.opened", overrides: ["attributes": "{\"picker\":\"gallery\"}"]), "attributes.picker"),
            ("unknown top-level field", event(overrides: ["email": quoted("a@b.c")]), "email"),
            ("over-long app", event(app: String(repeating: "a", count: 256)), "app"),
            ("over-long subject", event(subject: String(repeating: "s", count: 129)), "subject"),
            ("e-mail as subject", event(subject: "jane.doe@example.com"), "subject"),
            ("over-long flow", event(overrides: ["flow": quoted(String(repeating: "f", count: 65))]), "flow"),
            ("bad flow characters", event(overrides: ["flow": quoted("chat attachment")]), "flow"),
            ("bad osVersion", event(overrides: ["osVersion": quoted("fourteen")]), "osVersion"),
            ("experiment variant not a string", event(overrides: ["experiments": "{\"x\":1}"]), "experiments.x"),
            ("event over 16 KiB", event(overrides: ["attributes": "{\"note\":\(quoted(String(repeating: "x", count: 17_000)))}"]), "event"),
            ("absurd nesting", event(overrides: ["attributes": String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 40)]), "event"),
            ("null for a required field", event(overrides: ["platform": "null"]), "platform"),
        ]
    }
}

extension EventValidator {
    /// The refusal of `line` as the write path words it ("field: rule"), nil when it is valid.
    public func problem(line: String) -> String? {
        switch validate(line: line) {
        case .success: nil
        case let .failure(refusal): refusal.description
        }
    }
}
