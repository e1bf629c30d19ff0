import Analytics
import XCTest

/// Against published worked examples: Newcombe (1998), "Two-sided confidence intervals for the
/// single proportion" (Wilson intervals, Table I) and "Interval estimation for the difference
/// between independent proportions" (Wald interval, 56/70 vs 48/80); the z-test's values were
/// computed with Python's math.erfc as an independent reference.
final class StatisticsTests: XCTestCase {
    func testWilsonIntervalsMatchNewcombe() throws {
        let cases: [(Int, Int, Double, Double)] = [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0000, 0.1611), (1, 29, 0.0061, 0.1718)]
        for (x, n, low, high) in cases {
            let interval = try XCTUnwrap(Statistics.wilson(Proportion(x, of: n)))
            XCTAssertEqual(interval.low, low, accuracy: 0.00005, "\(x)/\(n)")
            XCTAssertEqual(interval.high, high, accuracy: 0.00005, "\(x)/\(n)")
        }
        XCTAssertNil(Statistics.wilson(Proportion(0, of: 0)))
        for n in 1...200 {  // exactly, so that a table shows 1, not 0.9999999999999999
            XCTAssertEqual(try XCTUnwrap(Statistics.wilson(Proportion(n, of: n))).high, 1, "\(n)/\(n)")
            XCTAssertEqual(try XCTUnwrap(Statistics.wilson(Proportion(0, of: n))).low, 0, "0/\(n)")
        }
    }

    func testDifferenceLiftAndZTest() throws {
        let comparison = try XCTUnwrap(Statistics.compare(Proportion(56, of: 70), baseline: Proportion(48, of: 80)))
        XCTAssertEqual(comparison.difference, 0.2, accuracy: 1e-12)
        XCTAssertEqual(comparison.differenceInterval.low, 0.0575, accuracy: 0.00005)
        XCTAssertEqual(comparison.differenceInterval.high, 0.3425, accuracy: 0.00005)
        XCTAssertEqual(try XCTUnwrap(comparison.relativeLift), 0.8 / 0.6 - 1, accuracy: 1e-12)
        XCTAssertEqual(try XCTUnwrap(comparison.z), 2.6501719512585336, accuracy: 1e-9)
        XCTAssertEqual(try XCTUnwrap(comparison.pValue), 0.008045081368196568, accuracy: 1e-9)
    }

    /// A very small p-value keeps its digits (2(1 - Phi(z)) computed by subtraction gives 0 here).
    func testSmallPValuesKeepTheirPrecision() throws {
        let strong = try XCTUnwrap(Statistics.compare(Proportion(900, of: 1000), baseline: Proportion(500, of: 1000)))
        XCTAssertEqual(try XCTUnwrap(strong.z), 19.518001458970662, accuracy: 1e-9)
        let p = try XCTUnwrap(strong.pValue)
        XCTAssertEqual(p, 7.719934594295977e-85, accuracy: 7.719934594295977e-85 * 1e-9)
        let clear = try XCTUnwrap(Statistics.compare(Proportion(150, of: 200), baseline: Proportion(100, of: 200)))
        XCTAssertEqual(try XCTUnwrap(clear.pValue), 2.4175638811190257e-07, accuracy: 2.4175638811190257e-07 * 1e-9)
    }

    func testDegenerateCasesGiveNoNaN() throws {
        XCTAssertNil(Statistics.compare(Proportion(0, of: 0), baseline: Proportion(1, of: 2)))
        let zeroBase = try XCTUnwrap(Statistics.compare(Proportion(3, of: 10), baseline: Proportion(0, of: 10)))
        XCTAssertNil(zeroBase.relativeLift)
        let same = try XCTUnwrap(Statistics.compare(Proportion(0, of: 10), baseline: Proportion(0, of: 10)))
        XCTAssertNil(same.z)
        XCTAssertNil(same.pValue)
        XCTAssertFalse(same.difference.isNaN)
    }

    func testSmallSampleFlags() {
        XCTAssertTrue(Proportion(10, of: 29).isTooSmall)
        XCTAssertTrue(Proportion(4, of: 100).isTooSmall)
        XCTAssertTrue(Proportion(96, of: 100).isTooSmall)
        XCTAssertFalse(Proportion(50, of: 100).isTooSmall)
        XCTAssertFalse(Proportion(5, of: 30).isTooSmall)
    }

    func testNormalCDF() {
        XCTAssertEqual(Statistics.normalCDF(0), 0.5, accuracy: 1e-12)
        XCTAssertEqual(Statistics.normalCDF(1.959964), 0.975, accuracy: 1e-6)
    }
}
