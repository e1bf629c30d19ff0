import Compliance
import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

final class FindingsTests: XCTestCase {
    func testEachRuleFiresOnItsEvidenceOnly() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        var events: [String] = []
        var n = 0
        func attempt(_ types: [(String, String?)], platform: String = "android", os: String = "14", flow: String = "gallery",
                     permission: String = "android.READ_MEDIA_IMAGES", subject: String? = nil) {
            let id = UUID()
            n += 1
            for (i, (type, attributes)) in types.enumerated() {
                var overrides = ["platform": EventFixtures.quoted(platform), "osVersion": EventFixtures.quoted(os),
                                 "flow": EventFixtures.quoted(flow), "permission": EventFixtures.quoted(permission)]
                if let attributes { overrides["attributes"] = attributes }
                events.append(EventFixtures.event(type: type, subject: subject ?? "f\(n)", occurredAt: "2026-10-03T09:15:\(10 + i).000Z",
                                                  attempt: id, overrides: overrides, removing: attributes == nil ? ["attributes", "experiments"] : ["experiments"]))
            }
        }
        let granted: [(String, String?)] = [("permission.prompted", nil), ("permission.granted", nil)]
        attempt(granted, flow: "avatar", permission: "android.READ_MEDIA_VIDEO")                          // picker would do
        attempt(granted, os: "14", permission: "android.READ_EXTERNAL_STORAGE")                           // nothing on 13+
        attempt([("permission.prompted", "{\"dialogShown\":false}"), ("permission.denied", "{\"permanent\":false}")],
                os: "13", permission: "android.READ_EXTERNAL_STORAGE")                                    // denied silently on 13+
        attempt(granted, platform: "ios", os: "17.2", flow: "editorSave", permission: "ios.photos.readWrite")  // add-only would do
        attempt([("permission.prompted", "{\"dialogShown\":false}"), ("permission.denied", "{\"permanent\":true}")])  // after denial
        attempt([("permission.prompted", nil), ("permission.limited", nil)], platform: "ios", os: "17.2", permission: "ios.photos.readWrite")
        for i in 0..<40 {   // unprimed: 25 of 40 denied; primed: 4 of 40 denied
            attempt([("permission.prompted", nil), (i < 25 ? "permission.denied" : "permission.granted", i < 25 ? "{\"permanent\":false}" : nil)],
                    os: "13")
            attempt([("prePermission.shown", nil), ("prePermission.accepted", nil), ("permission.prompted", nil),
                      (i < 4 ? "permission.denied" : "permission.granted", i < 4 ? "{\"permanent\":false}" : nil)], os: "13")
        }
        try TestDatabase.append(events, to: db)
        try Projector(connection: db).catchUp()

        let findings = try Findings.all(db)
        XCTAssertEqual(Set(findings.map(\.rule)), ["picker-would-do", "read-external-storage-on-13", "add-only-would-do", "unprimed-denials",
                                                   "repeated-after-denial", "limited-never-offered"])
        XCTAssertEqual(findings.first?.severity, .high)
        let unprimed = try XCTUnwrap(findings.first { $0.rule == "unprimed-denials" })
        XCTAssertEqual(unprimed.count, 40)
        XCTAssertTrue(unprimed.evidence.contains("62.5% denied, vs 10.0% after one"), unprimed.evidence)
        XCTAssertEqual(findings.first { $0.rule == "picker-would-do" }?.subject, "avatar: android.READ_MEDIA_VIDEO")
        XCTAssertEqual(findings.first { $0.rule == "limited-never-offered" }?.count, 1)
        // An erased install leaves the finding, as it leaves analytics.permission_state (undone here).
        try db.execute("begin")
        XCTAssertNotNil(try SubjectRights.erase(db, app: "com.example.app", subject: "f6", reason: "test"))
        XCTAssertNil(try Findings.all(db).first { $0.rule == "limited-never-offered" })
        try db.execute("rollback")
        let storage = try XCTUnwrap(findings.first { $0.rule == "read-external-storage-on-13" })
        XCTAssertEqual(storage.count, 2)
        XCTAssertEqual(storage.subject, "android.READ_EXTERNAL_STORAGE on Android 13, 14")
        XCTAssertTrue(storage.evidence.hasSuffix("(1 answered without a dialog)"), storage.evidence)
        XCTAssertEqual(findings.first { $0.rule == "repeated-after-denial" }?.count, 1)   // not the silent denial on 13
        XCTAssertTrue(try Findings.all(db, app: "no.such.app").isEmpty)

        // Offering the limited picker clears that finding.
        let install: String = "f6"   // the limited attempt above
        try TestDatabase.append([EventFixtures.event(type: "limitedSelection.changed", subject: install, attempt: nil,
                                                     overrides: ["platform": EventFixtures.quoted("ios"), "osVersion": EventFixtures.quoted("17.2"),
                                                                 "permission": EventFixtures.quoted("ios.photos.readWrite")])], to: db)
        XCTAssertNil(try Findings.all(db).first { $0.rule == "limited-never-offered" })

        // What mayRead asks for is what the findings read: a role granted exactly that gets the
        // same findings (in a transaction rolled back: roles belong to the cluster).
        let role = "pa_findings_\(UUID().uuidString.prefix(8).lowercased())"
        try db.execute("begin")
        defer { try? db.execute("rollback") }
        try db.execute("""
            create role \(role);
            grant usage on schema audit, projection, analytics to \(role);
            grant select on projection.attempts, projection.linked_permission_state, audit.events,
                            analytics.priming_arms, analytics.permission_outcomes_daily to \(role);
            """)
        let expected = try Findings.all(db)
        try db.execute("set local role \(role)")
        XCTAssertTrue(try Findings.mayRead(db))
        XCTAssertEqual(try Findings.all(db), expected)
    }

    /// "At least 10 points" includes 10 points: 70% unprimed against 60% primed (400 dialogs
    /// each, z = 2.97) is flagged, though 0.7 - 0.6 is below 0.1 in floating point.
    func testUnprimedDenialsTenPointsApartAreFlagged() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        var events: [String] = []
        for i in 0..<800 {
            let primed = i >= 400, denied = i % 400 < (primed ? 240 : 280)
            let types = (primed ? ["prePermission.shown", "prePermission.accepted"] : []) + ["permission.prompted", denied ? "permission.denied" : "permission.granted"]
            let attempt = UUID()
            for (k, type) in types.enumerated() {
                events.append(EventFixtures.event(type: type, subject: "b\(i)", occurredAt: "2026-10-03T09:15:\(10 + k).000Z", attempt: attempt,
                                                  overrides: type == "permission.denied" ? ["attributes": "{\"permanent\":false}"] : [:],
                                                  removing: type == "permission.denied" ? ["experiments"] : ["attributes", "experiments"]))
            }
        }
        try TestDatabase.append(events, to: db)
        try Projector(connection: db).catchUp()
        let finding = try XCTUnwrap(try Findings.all(db).first { $0.rule == "unprimed-denials" })
        XCTAssertTrue(finding.evidence.contains("70.0% denied, vs 60.0% after one"), finding.evidence)
    }
}
