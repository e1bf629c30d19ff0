import EventLog
import Foundation
import Postgres

/// `permaudit bench ingest`: NDJSON ingest through the write path vs raw COPY of the same rows
/// into a plain table with the same indexes, in the same run on the same server.
public struct IngestBenchmark {
    public var events: Int
    public var sqlDirectory: URL
    public var workDirectory: URL

    public init(events: Int, sqlDirectory: URL, workDirectory: URL) {
        self.events = events
        self.sqlDirectory = sqlDirectory
        self.workDirectory = workDirectory
    }

    public func run(_ context: BenchmarkContext) throws -> [BenchmarkRow] {
        try FileManager.default.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        let ndjson = workDirectory.appendingPathComponent("bench-ingest-\(events).ndjson")
        let tsv = workDirectory.appendingPathComponent("bench-ingest-\(events).tsv")
        defer {
            try? FileManager.default.removeItem(at: ndjson)
            try? FileManager.default.removeItem(at: tsv)
        }
        context.log("generating \(events) events")
        try generate(ndjson: ndjson, tsv: tsv)

        // Reference: raw COPY into a plain table with the log's indexes.
        let rawURL = try context.freshDatabase("permaudit_bench_raw", migrated: false, sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_raw") }
        let raw = try Connection(url: rawURL)
        try raw.execute("""
            create table raw_events (
                position bigint generated always as identity primary key,
                transaction_id xid8 not null default pg_current_xact_id(),
                event_id uuid not null unique, stream_key bigint not null, stream_version bigint not null,
                type text not null, occurred_at timestamptz not null, recorded_at timestamptz not null default now(),
                app text not null, platform text not null, os_major integer not null, app_version text not null,
                attempt uuid, permission text, flow text, payload jsonb not null,
                unique (stream_key, stream_version));
            create index on raw_events (transaction_id, position);
            """)
        context.log("raw COPY")
        var copied = 0
        let copySeconds = try measure {
            let fd = open(tsv.path, O_RDONLY)
            defer { close(fd) }
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            copied = try raw.copyIn("copy raw_events (event_id, stream_key, stream_version, type, occurred_at, app, platform, os_major, app_version, attempt, permission, flow, payload) from stdin") { writer in
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n <= 0 { break }
                    try writer.write(chunk[0..<n])
                }
            }
        }

        // PermissionAudit: the ingest command's library path.
        let logURL = try context.freshDatabase("permaudit_bench_ingest", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_ingest") }
        context.log("ingest")
        let residentBefore = currentResidentMiB()
        var summary = Ingestor.Summary()
        let ingestSeconds = try measure {
            summary = try Ingestor(log: EventLog(connection: try Connection(url: logURL))).ingest([ndjson.path])
        }
        guard summary.appended == events else {
            throw BenchmarkError("ingest appended \(summary.appended) of \(events) events")
        }
        return [
            BenchmarkRow(name: "raw COPY into a plain table (reference)", count: copied, seconds: copySeconds),
            BenchmarkRow(name: "permaudit ingest (validate + audit.append_events)", count: summary.appended, seconds: ingestSeconds,
                        note: String(format: "client RSS %.0f MiB before, peak %.0f MiB", residentBefore, peakResidentMiB())),
        ]
    }

    private func generate(ndjson: URL, tsv: URL) throws {
        _ = FileManager.default.createFile(atPath: ndjson.path, contents: nil)
        _ = FileManager.default.createFile(atPath: tsv.path, contents: nil)
        let jsonOut = try FileHandle(forWritingTo: ndjson)
        let tsvOut = try FileHandle(forWritingTo: tsv)
        defer { try? jsonOut.close(); try? tsvOut.close() }
        var generator = SyntheticEvents(seed: 42)
        var versions: [Int: Int] = [:]
        var jsonBuffer = "", tsvBuffer = ""
        for i in 0..<events {
            let event = generator.next()
            jsonBuffer += event.json + "\n"
            let version = versions[event.subject, default: 0]
            versions[event.subject] = version + 1
            tsvBuffer += event.copyRow(version: version)
            if i % 10_000 == 9_999 {
                jsonOut.write(Data(jsonBuffer.utf8)); jsonBuffer = ""
                tsvOut.write(Data(tsvBuffer.utf8)); tsvBuffer = ""
            }
        }
        jsonOut.write(Data(jsonBuffer.utf8))
        tsvOut.write(Data(tsvBuffer.utf8))
    }
}

/// `permaudit bench append`: single-event appends through the write path vs a plain one-row
/// INSERT per transaction, with 1 and 8 connections, in the same run on the same server.
public struct AppendBenchmark {
    public var eventsPerConnection: Int
    public var sqlDirectory: URL

    public init(eventsPerConnection: Int, sqlDirectory: URL) {
        self.eventsPerConnection = eventsPerConnection
        self.sqlDirectory = sqlDirectory
    }

    public func run(_ context: BenchmarkContext) throws -> [BenchmarkRow] {
        let url = try context.freshDatabase("permaudit_bench_append", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_append") }
        try Connection(url: url).execute("create table plain_insert (id bigint generated always as identity primary key, event_id uuid not null unique, payload jsonb not null)")
        var results: [BenchmarkRow] = []
        for connections in [1, 8] {
            // Events prepared up front so that only the database work is timed.
            var generator = SyntheticEvents(seed: UInt64(connections), subjects: 200_000)
            let batches = (0..<connections).map { _ in (0..<eventsPerConnection).map { _ in generator.next() } }
            context.log("plain INSERT, \(connections) connection(s)")
            let insert = try concurrently(connections) { worker in
                let db = try Connection(url: url)
                for event in batches[worker] {
                    try db.preparedQuery("insert into plain_insert (event_id, payload) values ($1::uuid, $2::jsonb)", [event.eventId, event.json])
                }
            }
            context.log("write path, \(connections) connection(s)")
            let append = try concurrently(connections) { worker in
                let log = EventLog(connection: try Connection(url: url))
                for event in batches[worker] {
                    try log.append([event.json])
                }
            }
            let total = connections * eventsPerConnection
            results.append(BenchmarkRow(name: "plain INSERT, \(connections) conn (reference)", count: total, seconds: insert))
            results.append(BenchmarkRow(name: "audit.append_events, \(connections) conn", count: total, seconds: append))
        }
        return results
    }

}

/// Runs `body` for each of `workers` workers at once; the wall-clock seconds, or the first error.
func concurrently(_ workers: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws -> Double {
    let errors = ErrorBox()
    let seconds = measure {
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            do { try body(worker) } catch { errors.record(error) }
        }
    }
    if let error = errors.first { throw error }
    return seconds
}

/// The first error of concurrent workers; a lock guards it.
final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var error: (any Error)?
    func record(_ error: any Error) { lock.lock(); if self.error == nil { self.error = error }; lock.unlock() }
    var first: (any Error)? { lock.lock(); defer { lock.unlock() }; return error }
}

public struct BenchmarkError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
