import Analytics
import Foundation
import PermissionEvents
import Postgres
import Reports
import Simulation
import TestSupport
import XCTest

/// The report, built from simulated traffic, recovers the simulation's true parameters.
final class ReportRecoveryTests: XCTestCase {
    func testTrueParametersLieInsideTheReportedIntervals() throws {
        // 95% intervals miss the truth 5% of the time by design: over 3 seeds x 10 intervals,
        // at most 3 misses are allowed (P(more than 3 misses) is about 6% for correct intervals,
        // and the seeds are fixed), and no truth may lie outside twice the interval's half-width
        // (a 99.99% interval): a wrong count, denominator or formula misses far more often and
        // by far more.
        var checks = 0
        var misses: [String] = []
        for seed: UInt64 in [21, 22, 23] {
            let url = try TestDatabase.create()
            defer { TestDatabase.drop(url) }
            let truth = try TestDatabase.loadSimulation(.october(seed: seed, subjects: 6000), into: url)
            let report = try Report.build(try Connection(url: url), filters: StatsQuery())

            func check(_ what: String, _ truthValue: Double, _ value: Double?, _ low: Double?, _ high: Double?) {
                guard let value, let low, let high else { return XCTFail("seed \(seed) \(what): no interval") }
                checks += 1
                let widened = (value - 2 * (value - low), value + 2 * (high - value))
                XCTAssertTrue(truthValue >= widened.0 && truthValue <= widened.1,
                              "seed \(seed) \(what): truth \(truthValue) far outside [\(low), \(high)]")
                if truthValue < low || truthValue > high {
                    misses.append("seed \(seed) \(what): truth \(truthValue) outside [\(low), \(high)]")
                }
            }

            // Denial at the dialog, per platform and arm.
            let byPlatform = try XCTUnwrap(report.item("priming_by_platform"))
            XCTAssertEqual(byPlatform.rows.count, 4)
            for row in byPlatform.rows.indices {
                let platform = try XCTUnwrap(Platform(rawValue: byPlatform.text(row, "platform")))
                let primed = byPlatform.text(row, "arm") == "primed"
                let dialogs = try XCTUnwrap(truth.dialogs[platform])
                XCTAssertEqual(byPlatform.number(row, "prompted"), Double(primed ? dialogs.primed : dialogs.unprimed),
                               "seed \(seed): dialogs shown, \(platform) \(primed ? "primed" : "unprimed")")
                check("denial at dialog \(platform) \(primed ? "primed" : "unprimed")", truth.denialAtDialog(platform, primed: primed),
                      byPlatform.number(row, "denial_rate_at_dialog"), byPlatform.number(row, "denial_at_dialog_low"),
                      byPlatform.number(row, "denial_at_dialog_high"))
            }

            // The experiment: each arm's access rate, and the effect (treatment - control).
            let experiments = try XCTUnwrap(report.item("experiments"))
            let arms = truth.experimentArms
            XCTAssertEqual(experiments.rows.count, arms.count)
            for arm in arms {
                let row = try XCTUnwrap(experiments.rows.indices.first {
                    experiments.text($0, "app") == arm.app && experiments.text($0, "variant") == arm.variant
                })
                XCTAssertEqual(experiments.number(row, "attempts"), Double(arm.attempts))
                check("access \(arm.app) \(arm.variant)", arm.expectedAccess, experiments.number(row, "access_rate"),
                      experiments.number(row, "access_low"), experiments.number(row, "access_high"))
                if arm.variant == "treatment" {
                    let control = try XCTUnwrap(arms.first { $0.app == arm.app && $0.variant == "control" })
                    check("effect \(arm.app)", arm.expectedAccess - control.expectedAccess, experiments.number(row, "difference"),
                          experiments.number(row, "difference_low"), experiments.number(row, "difference_high"))
                }
            }

            // What was sent: exact counts.
            XCTAssertEqual(report.overview.events, truth.events, "seed \(seed)")
            XCTAssertEqual(report.overview.lateEvents, truth.lateEvents, "seed \(seed)")
            XCTAssertEqual(report.overview.duplicates, truth.resentLines, "seed \(seed)")
            XCTAssertEqual(report.overview.rejected, truth.malformedLines, "seed \(seed)")
            XCTAssertGreaterThan(truth.lateEvents, 0)
        }
        XCTAssertEqual(checks, 30)
        XCTAssertLessThanOrEqual(misses.count, 3, misses.joined(separator: "\n"))
    }
}

extension Report {
    func item(_ name: String) -> ResultTable? {
        sections.lazy.flatMap(\.items).first { $0.name == name }?.table
    }
}

extension ResultTable {
    func text(_ row: Int, _ column: String) -> String {
        self.column(column).map { rows[row][$0].plain } ?? ""
    }
}
