@testable import Collector
import XCTest

/// Which queued requests share one call of the write path.
final class GroupCommitTests: XCTestCase {
    func submission(_ ids: [String]) -> Submission {
        Submission(events: ids.map { "{\"eventId\":\"\($0)\"}" }, ids: Set(ids), rejected: [:]) { _ in }
    }

    func testRequestsShareACallUpToTheEventLimit() {
        let queue = [submission(["a", "b"]), submission(["c"]), submission(["d", "e"])]
        XCTAssertEqual(GroupCommitter.groupSize(queue, maxEvents: 10), 3)
        XCTAssertEqual(GroupCommitter.groupSize(queue, maxEvents: 3), 2)
        // The first request goes alone when it is larger than the limit.
        XCTAssertEqual(GroupCommitter.groupSize([submission(["a", "b", "c"]), submission(["d"])], maxEvents: 2), 1)
    }

    /// A request repeating an id of an earlier one waits for the next call: in one call, the
    /// first copy of an id counts, so a stored event's exact copy (the third request) could be
    /// judged by another client's different event with that id (the second) and come back as a
    /// conflict.
    func testRequestsWithTheSameEventIdNeverShareACall() {
        let queue = [submission(["x"]), submission(["y", "z"]), submission(["z"]), submission(["w"])]
        XCTAssertEqual(GroupCommitter.groupSize(queue, maxEvents: 500), 2)
        XCTAssertEqual(GroupCommitter.groupSize(Array(queue.dropFirst(2)), maxEvents: 500), 2)
    }
}
