import Collector
import EventLog
import Foundation
import MicroHTTP
import Postgres

/// `permaudit bench serve`: batches of 50 events through the HTTP collector (keep-alive clients on
/// loopback, in this process) side by side with the same batches appended directly through
/// `EventLog.append` on as many database connections, at 8 and 64 concurrent connections.
public struct ServeBenchmark {
    public var eventsPerRow: Int
    public var sqlDirectory: URL
    public static let batchSize = 50

    public init(eventsPerRow: Int, sqlDirectory: URL) {
        self.eventsPerRow = eventsPerRow
        self.sqlDirectory = sqlDirectory
    }

    public struct Row: Sendable {
        public var row: BenchmarkRow
        public var p50: Double
        public var p99: Double
    }

    public func run(_ context: BenchmarkContext) throws -> [Row] {
        let url = try context.freshDatabase("permaudit_bench_serve", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_serve") }
        let db = try Connection(url: url)
        var keys: [String: String] = [:]
        for app in SyntheticEvents.apps { keys[app] = try APIKeys.create(app: app, on: db).key }
        let migrations = Set(try Migrator(directory: sqlDirectory).migrations.map(\.version))
        var rows: [Row] = []
        for (seed, connections) in [8, 64].enumerated() {
            // Batches of one app each (a key writes its own app's events), prepared up front.
            var generator = SyntheticEvents(seed: UInt64(100 + seed), subjects: 200_000)
            var byApp: [String: [String]] = [:]
            var batches: [(app: String, events: [String])] = []
            while batches.count * Self.batchSize < 2 * eventsPerRow {
                let event = generator.next()
                byApp[event.app, default: []].append(event.json)
                if byApp[event.app]!.count == Self.batchSize {
                    batches.append((event.app, byApp[event.app]!))
                    byApp[event.app] = []
                }
            }
            let half = batches.count / 2
            let direct = Array(batches[..<half]), served = Array(batches[half...])

            context.log("write path directly, \(connections) connections")
            let directLatencies = Latencies()
            let directSeconds = try concurrently(connections) { worker in
                let log = EventLog(connection: try Connection(url: url))
                for index in stride(from: worker, to: direct.count, by: connections) {
                    let started = DispatchTime.now().uptimeNanoseconds
                    try log.append(direct[index].events)
                    directLatencies.add(DispatchTime.now().uptimeNanoseconds - started)
                }
            }
            rows.append(Row(row: BenchmarkRow(name: "EventLog.append, \(connections) conn (reference)", count: direct.count * Self.batchSize,
                                              seconds: directSeconds, note: "batches of 50, one connection each"),
                            p50: directLatencies.quantile(0.5), p99: directLatencies.quantile(0.99)))

            context.log("collector, \(connections) HTTP connections")
            var configuration = CollectorConfiguration(databaseURL: url, requiredMigrations: migrations)
            configuration.port = 0
            configuration.rateLimit = 0
            let collector = try Collector(configuration)
            defer { collector.stop() }
            let servedLatencies = Latencies()
            let keyFor = keys
            let port = collector.port
            let servedSeconds = try concurrently(connections) { worker in
                let client = try HTTPClient(port: port)
                for index in stride(from: worker, to: served.count, by: connections) {
                    let body = Array(("[" + served[index].events.joined(separator: ",") + "]").utf8)
                    let started = DispatchTime.now().uptimeNanoseconds
                    let response = try client.send("POST", "/v1/events", headers: [
                        ("Content-Type", "application/json"), ("Authorization", "Bearer \(keyFor[served[index].app]!)"),
                    ], body: body)
                    servedLatencies.add(DispatchTime.now().uptimeNanoseconds - started)
                    guard response.status == 200 else { throw BenchmarkError("collector answered \(response.status)") }
                }
            }
            rows.append(Row(row: BenchmarkRow(name: "POST /v1/events, \(connections) conn", count: served.count * Self.batchSize,
                                              seconds: servedSeconds,
                                              note: "\(configuration.threads) HTTP threads, \(configuration.databaseConnections) database connections, group commit"),
                            p50: servedLatencies.quantile(0.5), p99: servedLatencies.quantile(0.99)))
        }
        return rows
    }

    /// A Markdown table: events/s, ratio to the direct row of the same connection count, p50, p99.
    public static func table(_ rows: [Row]) -> String {
        var text = "| measurement | events | seconds | events/s | vs reference | p50 ms | p99 ms | note |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
        for (index, row) in rows.enumerated() {
            let reference = rows[index - index % 2].row.rate
            text += "| \(row.row.name) | \(row.row.count) | \(String(format: "%.2f", row.row.seconds)) | \(String(format: "%.0f", row.row.rate)) | "
                + "\(String(format: "%.2fx", row.row.rate / max(reference, 1e-9))) | \(String(format: "%.1f", row.p50 * 1000)) | "
                + "\(String(format: "%.1f", row.p99 * 1000)) | \(row.row.note) |\n"
        }
        return text
    }
}

/// Durations of concurrent calls, in nanoseconds; a lock guards them.
final class Latencies: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [UInt64] = []
    func add(_ nanoseconds: UInt64) { lock.lock(); values.append(nanoseconds); lock.unlock() }
    /// The q-quantile in seconds (nearest rank).
    func quantile(_ q: Double) -> Double {
        lock.lock()
        defer { lock.unlock() }
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return Double(sorted[min(sorted.count - 1, Int((Double(sorted.count) * q).rounded(.up)) - 1)]) / 1e9
    }
}
