import Foundation
import PermissionEvents
import Simulation
import XCTest

final class SimulatorTests: XCTestCase {
    static let start: Int64 = 1_790_812_800_000  // 2026-10-01
    let validator = EventValidator(now: Date(timeIntervalSince1970: 1_800_000_000))

    func testSameSeedSameTrafficOtherSeedOtherTraffic() {
        let a = Simulator(seed: 9, subjects: 300, days: 14, start: Self.start).run()
        let b = Simulator(seed: 9, subjects: 300, days: 14, start: Self.start).run()
        let c = Simulator(seed: 10, subjects: 300, days: 14, start: Self.start).run()
        XCTAssertEqual(a.lines, b.lines)
        XCTAssertNotEqual(a.lines, c.lines)
        XCTAssertEqual(a.truth.summary, b.truth.summary)
    }

    func testEveryLineIsValidExceptTheBrokenOnesAndTheCountsAreExact() {
        let run = Simulator(seed: 4, subjects: 3000, days: 28, start: Self.start).run()
        var valid = 0, invalid = 0
        var ids: [String: Int] = [:]
        for line in run.lines {
            switch validator.validate(line: line) {
            case let .success(event): valid += 1; ids[event.eventId.uuidString, default: 0] += 1
            case .failure: invalid += 1
            }
        }
        XCTAssertEqual(invalid, run.truth.malformedLines)
        XCTAssertGreaterThan(invalid, 0)
        XCTAssertEqual(valid, run.truth.events + run.truth.resentLines)
        XCTAssertEqual(ids.count, run.truth.events)
        XCTAssertEqual(ids.values.filter { $0 > 1 }.reduce(0) { $0 + $1 - 1 }, run.truth.resentLines)
        XCTAssertGreaterThan(run.truth.resentLines, 0)
        XCTAssertGreaterThan(run.truth.lateEvents, 0)
    }

    /// The platform facts of the contract hold in the generated histories.
    func testHistoriesFollowThePlatformRules() throws {
        let run = Simulator(seed: 7, subjects: 4000, days: 28, start: Self.start).run()
        var histories: [String: [ValidatedEvent]] = [:]
        var types: Set<String> = []
        for line in run.lines {
            guard case let .success(event) = validator.validate(line: line) else { continue }
            types.insert(event.type.rawValue)
            if let permission = event.permission {
                histories["\(event.app) \(event.subject) \(permission.rawValue)", default: []].append(event)
            } else {
                XCTAssertTrue(event.type.rawValue.hasPrefix("picker."), "\(event.type) without permission")
            }
        }
        // Every type of the catalogue occurs.
        XCTAssertEqual(types.count, 14, "\(types.sorted())")
        var iosRepeats = 0, androidPermanent = 0
        for (_, history) in histories {
            let events = history.sorted { $0.occurredAt < $1.occurredAt }
            var denials = 0
            for event in events {
                let dialog = event.json["attributes"]?["dialogShown"] != .bool(false)
                switch (event.platform, event.type.rawValue) {
                case (.ios, "permission.prompted") where denials > 0:
                    XCTAssertFalse(dialog, "iOS shows no dialog after a denial")
                    iosRepeats += 1
                case (.android, "permission.prompted") where !dialog:
                    XCTAssertGreaterThanOrEqual(denials, 2, "Android answers without a dialog only after two denials")
                    androidPermanent += 1
                case (.android, "permission.restricted"):
                    XCTFail("restricted is an iOS status")
                case (.android, "permission.limited"):
                    XCTAssertGreaterThanOrEqual(event.osMajor, 14, "partial access exists from Android 14")
                case (_, "permission.denied"):
                    if event.json["attributes"]?["permanent"] == .bool(true) {
                        XCTAssertEqual(event.platform, .android)
                        XCTAssertGreaterThanOrEqual(denials + 1, 2)
                    }
                    denials += 1
                default:
                    break
                }
            }
        }
        XCTAssertGreaterThan(iosRepeats, 0)
        XCTAssertGreaterThan(androidPermanent, 0)
    }

    func testPickerAdoptionGrowsWithAppVersionAndTheEffectIsReal() {
        let model = Model()
        let shares = (0..<5).map { model.pickerShare(versionIndex: $0) }
        XCTAssertEqual(shares, shares.sorted())
        for platform in Platform.allCases {
            XCTAssertGreaterThan(model.experimentAccess(platform, treatment: true), model.experimentAccess(platform, treatment: false) + 0.05)
        }
    }
}
