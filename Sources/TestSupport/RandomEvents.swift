import Benchmarks
import Simulation
import Foundation

/// Random but valid event sets that exercise every rule of the metric definitions: outcomes
/// that change, ties in occurredAt, dimensions missing from early events, dialogs not shown,
/// permanent denials, experiments, picker flows and status observations.
public struct RandomEvents {
    public var generator: Generator

    public init(seed: UInt64) { generator = Generator(seed: seed) }

    public typealias Generator = SplitMix64

    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &generator)] }
    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &generator) < p }

    /// About `attempts` attempts over `subjects` installs, as JSON lines.
    public mutating func events(attempts: Int, subjects: Int) -> [String] {
        var lines: [String] = []
        let base = Date(timeIntervalSince1970: 1_790_000_000)
        let apps = ["com.example.a", "com.example.b"]
        for _ in 0..<attempts {
            let subject = Int.random(in: 0..<subjects, using: &generator)
            let ios = subject % 2 == 0
            let app = apps[subject % apps.count]
            let attempt = UUID()
            // Attempts straddle midnight sometimes, so the earliest event decides the day.
            var time = base.addingTimeInterval(Double(Int.random(in: 0..<(6 * 86_400), using: &generator)))
            let permission = ios ? pick(["ios.photos.readWrite", "ios.photos.addOnly"]) : pick(["android.READ_MEDIA_IMAGES", "android.READ_EXTERNAL_STORAGE"])
            let flow = pick(["avatar", "backup", "gallery"])
            let picker = chance(0.25)
            var types: [String]
            if picker {
                types = ["picker.opened"] + (chance(0.6) ? ["picker.completed"] : ["picker.cancelled"])
                if chance(0.15) { types += ["permission.prompted", "permission.granted"] }  // became a permission attempt
            } else {
                types = []
                if chance(0.5) { types += ["prePermission.shown", chance(0.8) ? "prePermission.accepted" : "prePermission.declined"] }
                if types.last != "prePermission.declined" || chance(0.2) {
                    types.append("permission.prompted")
                    types.append(pick(["permission.granted", "permission.limited", "permission.denied", "permission.denied", "permission.restricted"]))
                    if chance(0.2) { types.append(pick(["permission.granted", "permission.denied", "permission.limited"])) }  // a second answer
                }
                if chance(0.15) { types.append("settings.opened") }
            }
            let experimentVariant = chance(0.7) ? pick(["control", "treatment"]) : nil
            for (index, type) in types.enumerated() {
                if !chance(0.3) { time = time.addingTimeInterval(Double(Int.random(in: 1...4000, using: &generator))) }  // else a tie
                var fields = [
                    "\"eventId\":\"\(UUID().uuidString.lowercased())\"", "\"type\":\"\(type)\"",
                    "\"occurredAt\":\"\(Self.format(time))\"", "\"app\":\"\(app)\"", "\"subject\":\"s-\(subject)\"",
                    "\"platform\":\"\(ios ? "ios" : "android")\"",
                    "\"osVersion\":\"\(ios ? ["16.4", "17.1", "18.0"][subject % 3] : ["13", "14"][subject % 2])\"",
                    "\"appVersion\":\"\(["5.0.0", "5.1.0"][index % 2])\"",
                    "\"attempt\":\"\(attempt.uuidString.lowercased())\"",
                ]
                if !type.hasPrefix("picker.") { fields.append("\"permission\":\"\(permission)\"") }
                if index > 0 || chance(0.5) { fields.append("\"flow\":\"\(index == 0 ? flow : pick([flow, "gallery"]))\"") }
                if let experimentVariant, index > 0 || chance(0.5) { fields.append("\"experiments\":{\"exp-1\":\"\(experimentVariant)\"}") }
                switch type {
                case "permission.prompted": fields.append("\"attributes\":{\"dialogShown\":\(chance(0.85))}")
                case "permission.denied": fields.append("\"attributes\":{\"permanent\":\(chance(0.3))}")
                case "picker.opened": fields.append("\"attributes\":{\"picker\":\"\(ios ? "phpicker" : "androidPhotoPicker")\"}")
                case "picker.completed": fields.append("\"attributes\":{\"selectedCount\":1}")
                default: break
                }
                lines.append("{" + fields.joined(separator: ",") + "}")
            }
            if chance(0.3) {
                // A status observation outside any attempt, e.g. after a change in Settings.
                time = time.addingTimeInterval(Double(Int.random(in: -3000...9000, using: &generator)))
                lines.append("{\"eventId\":\"\(UUID().uuidString.lowercased())\",\"type\":\"permission.statusObserved\",\"occurredAt\":\"\(Self.format(time))\",\"app\":\"\(app)\",\"subject\":\"s-\(subject)\",\"platform\":\"\(ios ? "ios" : "android")\",\"osVersion\":\"14\",\"appVersion\":\"5.1.0\",\"permission\":\"\(permission)\",\"attributes\":{\"status\":\"\(pick(["granted", "denied", "limited", "notDetermined"]))\"}}")
            }
        }
        return lines
    }

    static func format(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }
}
