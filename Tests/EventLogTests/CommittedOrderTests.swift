import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

final class CommittedOrderTests: DatabaseTestCase {
    func testReaderNeverSkipsAnEventCommittedLate() throws {
        let holder = try Connection(url: url)
        let writer = EventLog(connection: try Connection(url: url))
        let reader = EventLog(connection: try Connection(url: url))

        try writer.append([EventFixtures.event(subject: "a")])
        // A transaction takes a position and stays open...
        try holder.execute("BEGIN")
        let held = try EventLog(connection: holder).append([EventFixtures.event(subject: "held")])
        let heldPosition = try XCTUnwrap(held.first?.position)
        // ...while later events commit.
        let later = try writer.append([EventFixtures.event(subject: "b"), EventFixtures.event(subject: "c")])
        XCTAssertGreaterThan(try XCTUnwrap(later.first?.position), heldPosition)

        // The reader stops below the open transaction: it sees only the first event.
        var checkpoint = EventLog.Checkpoint.start
        var seen: [Int64] = []
        var page = try reader.read(after: checkpoint)
        seen += page.map(\.position)
        if let last = page.last { checkpoint = last.checkpoint }
        XCTAssertEqual(seen.count, 1)

        try holder.execute("COMMIT")
        page = try reader.read(after: checkpoint)
        seen += page.map(\.position)
        XCTAssertEqual(Set(seen).count, 4)
        XCTAssertTrue(seen.contains(heldPosition), "the late-committing event is read after it commits")
        XCTAssertEqual(seen.count, Set(seen).count, "and read once")
        XCTAssertTrue(try reader.read(after: page.last!.checkpoint).isEmpty, "nothing more to read")
    }

    func testPagingCoversEverythingOnce() throws {
        let log = EventLog(connection: try Connection(url: url))
        for chunk in 0..<5 {
            _ = try log.append((0..<40).map { EventFixtures.event(subject: "s\($0 % 7)-\(chunk)") })
        }
        var checkpoint = EventLog.Checkpoint.start
        var positions: [Int64] = []
        while true {
            let page = try log.read(after: checkpoint, limit: 17)
            guard let last = page.last else { break }
            positions += page.map(\.position)
            // As a reader keeps it between runs.
            let kept = try JSONEncoder().encode(last.checkpoint)
            checkpoint = try JSONDecoder().decode(EventLog.Checkpoint.self, from: kept)
            XCTAssertEqual(checkpoint, last.checkpoint)
        }
        XCTAssertEqual(positions.count, 200)
        XCTAssertEqual(Set(positions).count, 200)
    }
}
