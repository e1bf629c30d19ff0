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
        var pickers: [String: Set<String>] = [:]       // install -> picker kinds
        var limits: [String: Int] = [:]                 // attempt -> selectionLimit
        var installs: [String: [ValidatedEvent]] = [:]  // iOS installs' permission events
        for line in run.lines {
            guard case let .success(event) = validator.validate(line: line) else { continue }
            types.insert(event.type.rawValue)
            let attempt = event.attempt?.uuidString ?? ""
            switch event.type.rawValue {
            case "picker.opened":
                guard case let .string(kind) = event.json["attributes"]?["picker"] else { XCTFail("no picker kind"); continue }
                pickers[event.subject, default: []].insert(kind)
                if kind == "androidOpenDocument" { XCTAssertLessThan(event.osMajor, 13, "the photo picker is built into Android 13+") }
                if case let .number(limit) = event.json["attributes"]?["selectionLimit"] { limits[attempt] = Int(limit) ?? 0 }
            case "picker.completed":
                if case let .number(count) = event.json["attributes"]?["selectedCount"], let count = Int(count), let limit = limits[attempt], limit > 0 {
                    XCTAssertLessThanOrEqual(count, limit, "a picker returns at most its limit")
                }
            default:
                break
            }
            if let permission = event.permission {
                histories["\(event.app) \(event.subject) \(permission.rawValue)", default: []].append(event)
                if event.platform == .ios { installs["\(event.app) \(event.subject)", default: []].append(event) }
            } else {
                XCTAssertTrue(event.type.rawValue.hasPrefix("picker."), "\(event.type) without permission")
            }
        }
        XCTAssertEqual(pickers.values.filter { $0.count > 1 }.count, 0, "a device opens one kind of picker")
        // iOS: .addOnly asked while .readWrite is granted is authorized without a dialog.
        var addOnlyAtOnce = 0
        for (_, events) in installs {
            var readWriteGranted = false
            for event in events.sorted(by: { $0.occurredAt < $1.occurredAt }) {
                switch (event.permission?.rawValue, event.type.rawValue) {
                case ("ios.photos.readWrite", "permission.granted"): readWriteGranted = true
                case ("ios.photos.readWrite", "permission.denied"): readWriteGranted = false
                case ("ios.photos.addOnly", "permission.prompted") where readWriteGranted:
                    XCTAssertEqual(event.json["attributes"]?["dialogShown"], .bool(false))
                    addOnlyAtOnce += 1
                default: break
                }
            }
        }
        XCTAssertGreaterThan(addOnlyAtOnce, 0)
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
