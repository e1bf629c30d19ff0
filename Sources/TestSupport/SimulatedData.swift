import EventLog
import Foundation
import Postgres
import Projections
import Simulation

extension TestDatabase {
    /// Simulates traffic, ingests it through the write path (broken events rejected and counted,
    /// as `permaudit ingest --rejects` does) and projects it; returns what the simulation used.
    @discardableResult
    public static func loadSimulation(_ simulator: Simulator, into url: String) throws -> Truth {
        let run = simulator.run()
        let path = NSTemporaryDirectory() + "permaudit-test-simulation-\(UUID().uuidString).ndjson"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data((run.lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path))
        let ingestor = Ingestor(log: EventLog(connection: try Connection(url: url)))
        ingestor.mode = .storeValid
        _ = try ingestor.ingest([path])
        try Projector(url: url).catchUp()
        return run.truth
    }
}

extension Simulator {
    /// A simulation over October 2026 (a fixed period, so tests do not depend on today).
    public static func october(seed: UInt64, subjects: Int, model: Model = Model()) -> Simulator {
        Simulator(model: model, seed: seed, subjects: subjects, days: 28, start: 1_790_812_800_000)  // 2026-10-01
    }
}
