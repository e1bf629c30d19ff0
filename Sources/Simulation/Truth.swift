import Foundation
import PermissionEvents

/// What a simulation used and generated: the model's true parameters, the expected values a
/// report should recover, and exact counts of what was sent.
public struct Truth: Sendable {
    public let model: Model
    public var subjects = 0
    public var sessions = 0
    /// Distinct valid events generated (each stored once).
    public var events = 0
    /// Extra copies of events sent again (duplicates for the write path).
    public var resentLines = 0
    /// Lines that break the contract (rejected by the write path).
    public var malformedLines = 0
    /// Valid events delivered after an event of the same install that occurred later.
    public var lateEvents = 0
    /// System dialogs shown, by platform and arm (primed: after an accepted pre-permission screen).
    public var dialogs: [Platform: (unprimed: Int, primed: Int)] = [.ios: (0, 0), .android: (0, 0)]
    /// First permission attempts in the experiment, by app, arm and platform.
    public var experimentAttempts: [String: [Bool: [Platform: Int]]] = [:]

    init(model: Model) { self.model = model }

    /// True probability of a denial at a system dialog.
    public func denialAtDialog(_ platform: Platform, primed: Bool) -> Double {
        (primed ? model.denyPrimed : model.denyUnprimed)[platform]!
    }

    public struct ExperimentArm: Sendable {
        public var app: String
        public var variant: String
        public var attempts: Int
        /// Expected access rate given the arm's platform mix.
        public var expectedAccess: Double
    }

    /// Each app's experiment arms with their expected access rates (control first).
    public var experimentArms: [ExperimentArm] {
        experimentAttempts.keys.sorted().flatMap { app in
            [false, true].map { treatment in
                let counts = experimentAttempts[app]?[treatment] ?? [:]
                let n = counts.values.reduce(0, +)
                let expected = counts.reduce(0.0) { $0 + Double($1.value) * model.experimentAccess($1.key, treatment: treatment) }
                return ExperimentArm(app: app, variant: treatment ? "treatment" : "control", attempts: n,
                                     expectedAccess: n == 0 ? 0 : expected / Double(n))
            }
        }
    }

    mutating func countDialog(platform: Platform, primed: Bool) {
        if primed { dialogs[platform]!.primed += 1 } else { dialogs[platform]!.unprimed += 1 }
    }

    mutating func countExperimentAttempt(app: String, treatment: Bool, platform: Platform) {
        experimentAttempts[app, default: [:]][treatment, default: [:]][platform, default: 0] += 1
    }

    /// Counts late events the way the log does: in delivery order, per install, an event is late
    /// when an event that occurred after it was delivered before it.
    mutating func countLate(_ lines: [Line]) {
        var latest: [Int: Int64] = [:]
        for line in lines where line.valid && line.original {
            if let seen = latest[line.stream], line.occurredAt < seen {
                lateEvents += 1
            } else {
                latest[line.stream] = line.occurredAt
            }
        }
    }

    /// The parameters and counts, as lines of text for a terminal.
    public var summary: [String] {
        var lines = ["True parameters (what a report should recover):"]
        for platform in Platform.allCases {
            lines.append(String(format: "  denial at the dialog, %@: unprimed %.1f%%, primed %.1f%%", platform.rawValue,
                                100 * model.denyUnprimed[platform]!, 100 * model.denyPrimed[platform]!))
        }
        lines.append(String(format: "  limited at the dialog: iOS .readWrite %.1f%%, Android 14+ %.1f%%",
                            100 * model.limited[.ios]!, 100 * model.limited[.android]!))
        lines.append(String(format: "  acceptance at the pre-permission screen %.1f%%; restricted iOS devices %.1f%%",
                            100 * model.acceptPrePermission, 100 * model.restrictedShare))
        lines.append("  picker opened in avatar/chatAttachment uses by app version index 0-4: "
                     + (0..<5).map { String(format: "%.0f%%", 100 * model.pickerShare(versionIndex: $0)) }.joined(separator: ", ")
                     + " of all uses (picker adoption counts attempts: uses with access granted make none, so it reads higher)")
        let arms = experimentArms
        for app in Set(arms.map(\.app)).sorted() {
            let pair = arms.filter { $0.app == app }
            let control = pair[0], treatment = pair[1]
            lines.append(String(format: "  %@ %@: expected access control %.1f%% (n=%d), treatment %.1f%% (n=%d), effect %+.1f pp",
                                model.experimentKey, app, 100 * control.expectedAccess, control.attempts,
                                100 * treatment.expectedAccess, treatment.attempts,
                                100 * (treatment.expectedAccess - control.expectedAccess)))
        }
        lines.append("Generated: \(subjects) installs, \(sessions) sessions, \(events) events, \(resentLines) re-sent, "
                     + "\(malformedLines) malformed, \(lateEvents) late")
        return lines
    }
}
