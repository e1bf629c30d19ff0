import Foundation
import PermissionEvents
import Postgres

/// `permaudit audit permissions`: over-permission findings, each with its evidence (counts
/// from the projections and the log) and the platform guidance behind it.
public struct Finding: Sendable, Equatable {
    public enum Severity: String, Sendable, Comparable {
        case high, medium, low
        var rank: Int { self == .high ? 0 : self == .medium ? 1 : 2 }
        public static func < (a: Severity, b: Severity) -> Bool { a.rank < b.rank }
    }

    public var rule: String
    public var severity: Severity
    public var app: String
    public var platform: String
    /// What the finding is about: a flow, a permission, an OS range.
    public var subject: String
    /// How many attempts or installs show it.
    public var count: Int
    public var evidence: String
    public var guidance: String
}

public enum Findings {
    /// Flows that pick a few items: the system picker serves them without any permission.
    public static let singleSelectionFlows = ["avatar", "chatAttachment"]
    /// Flows that only save media: add-only access (iOS) or no permission (Android 10+) serves them.
    public static let saveOnlyFlows = ["editorSave"]
    static let fullAccess = ["ios.photos.readWrite", "android.READ_MEDIA_IMAGES", "android.READ_MEDIA_VIDEO", "android.READ_EXTERNAL_STORAGE"]

    /// Whether the session's role may read what the findings read (the projections, two views and
    /// the log: the auditor and the owner may, the analyst may not). Asked before reading, so
    /// that a refusal does not end a caller's transaction.
    public static func mayRead(_ db: Connection) throws -> Bool {
        try db.mayRead(["projection.attempts", "projection.linked_permission_state", "audit.events",
                        "analytics.priming_arms", "analytics.permission_outcomes_daily"])
    }

    /// Whether the findings have anything to judge for this app and platform (nil: all): a
    /// projected attempt, or a permission state, on any day.
    public static func haveEvidence(_ db: Connection, app: String?, platform: String?) throws -> Bool {
        try db.query("""
            select exists (select from projection.attempts a
                            where ($1::text is null or a.app = $1) and ($2::text is null or a.platform = $2))
                or exists (select from projection.linked_permission_state s
                            where ($1::text is null or s.app = $1)
                              and ($2::text is null or s.permission like $2 || '.%'))
            """, [app, platform]).scalar()
    }

    public static func all(_ db: Connection, app: String? = nil) throws -> [Finding] {
        var findings: [Finding] = []

        for (app, platform, flow, permission, prompted) in try fullAccessPrompts(db, app: app, flows: singleSelectionFlows) {
            findings.append(Finding(
                rule: "picker-would-do", severity: platform == "android" ? .high : .medium, app: app, platform: platform,
                subject: "\(flow): \(permission)", count: prompted,
                evidence: "\(prompted) system dialogs asked for full library access in the single-selection flow \(flow)",
                guidance: platform == "android"
                    ? "Use the Android photo picker (PickVisualMedia), which needs no permission; Google Play policy (2024-25) requires the picker for apps that only pick photos occasionally and allows READ_MEDIA_IMAGES/VIDEO only for apps whose core function needs broad access."
                    : "Use PHPickerViewController (iOS 14+; UIImagePickerController before it), which runs out of process and needs no photo-library permission."))
        }

        // Every request counts, with or without a dialog: on 13+ the system denies it without one.
        for (app, majors, requests, silent) in try db.query("""
            select app, string_agg(distinct os_major::text, ', '), count(*)::bigint, count(*) filter (where not prompted_dialog)::bigint
              from projection.attempts
             where ($1::text is null or app = $1) and permission = 'android.READ_EXTERNAL_STORAGE' and os_major >= 13
               and prompted_any
             group by 1 order by 1
            """, [app]).decode((String, String, Int, Int).self) {
            findings.append(Finding(
                rule: "read-external-storage-on-13", severity: .high, app: app, platform: "android",
                subject: "android.READ_EXTERNAL_STORAGE on Android \(majors)", count: requests,
                evidence: "\(requests) requests for READ_EXTERNAL_STORAGE on Android 13 or later, where it grants no media access"
                    + (silent > 0 ? " (\(silent) answered without a dialog)" : ""),
                guidance: "Declare READ_EXTERNAL_STORAGE with android:maxSdkVersion=\"32\"; on API 33+ request READ_MEDIA_IMAGES/VIDEO (or READ_MEDIA_VISUAL_USER_SELECTED on 14+), or use the photo picker."))
        }

        for (app, platform, flow, permission, prompted) in try fullAccessPrompts(db, app: app, flows: saveOnlyFlows) {
            findings.append(Finding(
                rule: "add-only-would-do", severity: .medium, app: app, platform: platform, subject: "\(flow): \(permission)",
                count: prompted, evidence: "\(prompted) system dialogs asked to read the library in the save-only flow \(flow)",
                guidance: platform == "ios"
                    ? "Request .addOnly (NSPhotoLibraryAddUsageDescription): saving needs no read access."
                    : "Save through MediaStore, which needs no permission on Android 10 and later."))
        }

        for (app, platform, permission, unprimedPrompted, unprimedDenied, primedPrompted, primedDenied) in try db.query("""
            select app, platform, permission,
                   sum(prompted) filter (where arm = 'unprimed')::bigint, sum(denied_at_dialog) filter (where arm = 'unprimed')::bigint,
                   sum(prompted) filter (where arm = 'primed')::bigint, sum(denied_at_dialog) filter (where arm = 'primed')::bigint
              from analytics.priming_arms
             where ($1::text is null or app = $1)
             group by 1, 2, 3
            having sum(prompted) filter (where arm = 'unprimed') >= 30 and sum(prompted) filter (where arm = 'primed') >= 30
             order by 1, 2, 3
            """, [app]).decode((String, String, String?, Int, Int, Int, Int).self) {
            let unprimed = Double(unprimedDenied) / Double(unprimedPrompted), primed = Double(primedDenied) / Double(primedPrompted)
            let pooled = Double(unprimedDenied + primedDenied) / Double(unprimedPrompted + primedPrompted)
            let se = (pooled * (1 - pooled) * (1 / Double(unprimedPrompted) + 1 / Double(primedPrompted))).squareRoot()
            // At least 10 points, compared in integers: 0.7 - 0.6 is below 0.1 in floating point.
            let tenPoints = 10 * (unprimedDenied * primedPrompted - primedDenied * unprimedPrompted) >= unprimedPrompted * primedPrompted
            guard tenPoints, se > 0, (unprimed - primed) / se > 2.576 else { continue }  // p < 0.01
            findings.append(Finding(
                rule: "unprimed-denials", severity: .medium, app: app, platform: platform, subject: permission ?? "(no permission)",
                count: unprimedPrompted,
                evidence: String(format: "%d dialogs without a pre-permission screen: %.1f%% denied, vs %.1f%% after one (%d dialogs)",
                                 unprimedPrompted, 100 * unprimed, 100 * primed, primedPrompted),
                guidance: "Explain why the app needs photos on a pre-permission screen before the system dialog (both platforms recommend it; a common figure: 32% of users deny when they do not understand why)."))
        }

        for (app, platform, permission, attempts) in try db.query("""
            select app, platform, permission, count(*)::bigint
              from projection.attempts
             where ($1::text is null or app = $1) and prompted_any and not prompted_dialog and outcome = 'denied'
               and (permission = 'android.READ_EXTERNAL_STORAGE' and os_major >= 13) is not true  -- the rule above
             group by 1, 2, 3 order by 1, 2, 3
            """, [app]).decode((String, String, String?, Int).self) {
            findings.append(Finding(
                rule: "repeated-after-denial", severity: .medium, app: app, platform: platform, subject: permission ?? "(no permission)",
                count: attempts,
                evidence: "\(attempts) requests answered \"denied\" by the system without a dialog, "
                    + (platform == "ios" ? "as iOS does after a denial" : "as Android does after \"don't ask again\""),
                guidance: platform == "ios"
                    ? "After a denial iOS shows the dialog no more: check authorizationStatus first and offer Settings instead of requesting again."
                    : "After two denials Android 11+ shows the dialog no more (\"don't ask again\"): use shouldShowRequestPermissionRationale and offer Settings."))
        }

        for (app, platform, permission, installs) in try db.query("""
            select s.app, case when s.permission like 'ios.%' then 'ios' else 'android' end, s.permission, count(*)::bigint
              from projection.linked_permission_state s
             where ($1::text is null or s.app = $1) and s.state = 'limited'
               and not exists (select 1 from audit.events e
                                where e.stream_key = s.stream_key and e.type = 'limitedSelection.changed'
                                  and e.payload->'attributes'->>'trigger' = 'app')
             group by 1, 2, 3 order by 1, 2, 3
            """, [app]).decode((String, String, String, Int).self) {
            findings.append(Finding(
                rule: "limited-never-offered", severity: .low, app: app, platform: platform, subject: permission, count: installs,
                evidence: "\(installs) installs with limited access were never offered to change their selection",
                guidance: platform == "ios"
                    ? "Offer presentLimitedLibraryPicker where the app shows the selection, so users can add photos without going to Settings."
                    : "On Android 14+ request READ_MEDIA_IMAGES again from the app's UI to let the user re-select photos."))
        }
        return findings.sorted { ($0.severity, $0.app, $0.rule, $0.platform, $0.subject) < ($1.severity, $1.app, $1.rule, $1.platform, $1.subject) }
    }

    /// Prompts for full library access in these flows, per app, platform, flow and permission.
    static func fullAccessPrompts(_ db: Connection, app: String?, flows: [String]) throws -> [(String, String, String, String, Int)] {
        try db.query("""
            select app, platform, flow, permission, sum(prompted)::bigint
              from analytics.permission_outcomes_daily
             where ($1::text is null or app = $1) and flow = any($2::text[]) and permission = any($3::text[])
             group by 1, 2, 3, 4 order by 1, 2, 3, 4
            """, [app, flows, fullAccess])
            .decode((String, String, String, String, Int).self)
    }

    public static func json(_ findings: [Finding]) -> String {
        func q(_ s: String) -> String { var out = ""; JSONValue.writeQuoted(s, to: &out); return out }
        return "[" + findings.map { f in
            "{\"rule\":\(q(f.rule)),\"severity\":\(q(f.severity.rawValue)),\"app\":\(q(f.app)),\"platform\":\(q(f.platform)),"
                + "\"subject\":\(q(f.subject)),\"count\":\(f.count),\"evidence\":\(q(f.evidence)),\"guidance\":\(q(f.guidance))}"
        }.joined(separator: ",\n") + "]\n"
    }
}
