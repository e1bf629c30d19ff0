@testable import Reports
import XCTest

/// A chart's labels, cut to 40 characters, stay apart.
final class ChartLabelTests: XCTestCase {
    func testLabelsThatDifferAnywhereStayApart() {
        // Alike but for one character, each at another place (so that no one cut shows them all).
        let spread = (0..<6).map { i in String(repeating: "a", count: 20 + 30 * i) + "b" + String(repeating: "a", count: 209 - 30 * i) }
        // Alike but for the middle.
        let middle = (0..<15).map { "com.example.app · 1.\($0).0-a-rather-long-build-label-of-the-nightly-channel" }
        // Multi-scalar characters: flags, a family, combining accents.
        let emoji = (0..<4).map { "🇩🇪👨‍👩‍👧" + String(repeating: "e\u{301}", count: 30) + "\($0)" + String(repeating: "🇫🇷", count: 30) }
        for labels in [spread, middle, emoji, ["short", "short", "a" + String(repeating: "x", count: 60)]] {
            let short = SVGChart.shorten(labels)
            XCTAssertEqual(short.count, labels.count)
            XCTAssertTrue(short.allSatisfy { $0.count <= 40 }, "\(short)")
            // Labels that differ read differently; equal ones stay equal.
            for i in labels.indices {
                for j in labels.indices where j > i {
                    XCTAssertEqual(short[i] == short[j], labels[i] == labels[j], "\(labels[i]) / \(labels[j]): \(short[i])")
                }
            }
        }
        XCTAssertEqual(SVGChart.shorten(["avatar", "backup"]), ["avatar", "backup"], "short labels as they are")
    }
}
