import Analytics
import XCTest

/// Text from clients (app versions, experiment variants) reaches the terminal and CSV files.
final class ResultTableTests: XCTestCase {
    private let table = ResultTable(title: "Variants of \u{1B}[2J", columns: ["variant", "attempts"], rows: [
        [.text("a,b"), .integer(1)], [.text("line\r\nbreak"), .integer(2)], [.text("cr\ronly"), .integer(3)],
        [.text("say \"hi\""), .integer(4)], [.text("\u{1B}[31mred\u{7}"), .integer(5)], [.text("plain"), .null],
    ])

    func testCSVQuotesEveryFieldThatHoldsADelimiterAQuoteOrALineBreak() {
        XCTAssertEqual(table.csv, """
            variant,attempts
            "a,b",1
            "line\r\nbreak",2
            "cr\ronly",3
            "say ""hi\""",4
            \u{1B}[31mred\u{7},5
            plain,

            """)
    }

    /// A p-value of 2.4e-07 is not 0.0000 in the terminal; CSV keeps every digit.
    func testTinyNumbersAreNotShownAsZero() {
        let cells: [ResultTable.Cell] = [.number(2.4e-7), .number(-3e-9), .number(0.00005), .number(0), .number(0.12345)]
        XCTAssertEqual(cells.map(\.plain), ["2.4e-07", "-3.0e-09", "0.0001", "0.0000", "0.1235"])
        XCTAssertEqual(cells[0].exact, "2.4e-07")
    }

    func testAnEmptyFirstCellKeepsItsColumn() {
        let groups = ResultTable(title: "Picker", columns: ["permission", "flow", "attempts"],
                                 rows: [[.null, .text("avatar"), .integer(76)], [.text("ios.photos.addOnly"), .null, .integer(3)]])
        XCTAssertEqual(groups.text, """
            Picker
            permission          flow    attempts
            ------------------  ------  --------
                                avatar  76
            ios.photos.addOnly          3

            """)
    }

    func testTerminalTextShowsControlCharactersInsteadOfSendingThem() {
        let text = table.text
        XCTAssertFalse(text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" }, text)
        XCTAssertTrue(text.hasPrefix("Variants of \\u{1B}[2J\n"), text)
        XCTAssertTrue(text.contains("\\u{1B}[31mred\\u{7}   5\n"), text)
        XCTAssertTrue(text.contains("line\\u{D}\\u{A}break"), text)
    }
}
