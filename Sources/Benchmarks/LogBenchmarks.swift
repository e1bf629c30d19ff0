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
        try PlainLog.create("public.raw_events", on: raw)
        context.log("raw COPY")
        var copied = 0
        let copySeconds = try measure {
            let fd = open(tsv.path, O_RDONLY)
            defer { close(fd) }
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            copied = try raw.copyIn("copy public.raw_events (event_id, stream_key, stream_version, type, occurred_at, app, platform, os_major, app_version, attempt, permission, flow, payload) from stdin") { writer in
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if n <= 0 { break }
                    try writer.write(chunk[0..<n])
                }
            }
        }

        // Not a product path: the floor of any write path that takes JSON arrays of events.
        try PlainLog.create("public.floor_log", on: raw)
        try raw.execute(PlainLog.floorFunction)
        context.log("write-path floor")
        var floored = 0
        let floorSeconds = try measure {
            let reader = try LineReader(path: ndjson.path)
            var array: [UInt8] = []
            var lines = 0
            func send() throws {
                array.append(UInt8(ascii: "]"))
                floored += try raw.preparedQuery("select * from public.floor_append($1::jsonb)", [String(decoding: array, as: UTF8.self)]).count
                array.removeAll(keepingCapacity: true)
                lines = 0
            }
            try raw.transaction {
                while let (_, line) = try reader.next() {
                    array.append(UInt8(ascii: lines == 0 ? "[" : ","))
                    array.append(contentsOf: line)
                    lines += 1
                    if lines == 1000 { try send() }
                }
                if lines > 0 { try send() }
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
            BenchmarkRow(name: "write-path floor: JSON arrays of 1000 inserted by one statement, no checks", count: floored,
                         seconds: floorSeconds, note: "not a product path: the least a write path over JSON arrays does"),
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

    /// One table per connection count, each led by its reference row.
    public func run(_ context: BenchmarkContext) throws -> [[BenchmarkRow]] {
        let url = try context.freshDatabase("permaudit_bench_append", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_append") }
        let setup = try Connection(url: url)
        try setup.execute("create table public.plain_insert (id bigint generated always as identity primary key, event_id uuid not null unique, payload jsonb not null)")
        try PlainLog.create("public.plain_log", on: setup)
        try PlainLog.create("public.floor_log", on: setup)
        try setup.execute(PlainLog.floorFunction)
        var results: [[BenchmarkRow]] = []
        for connections in [1, 8] {
            // Events prepared up front so that only the database work is timed.
            var generator = SyntheticEvents(seed: UInt64(connections), subjects: 200_000)
            let batches = (0..<connections).map { _ in (0..<eventsPerConnection).map { _ in generator.next() } }
            context.log("plain INSERT, \(connections) connection(s)")
            let insert = try concurrently(connections) { worker in
                let db = try Connection(url: url)
                for event in batches[worker] {
                    try db.preparedQuery("insert into public.plain_insert (event_id, payload) values ($1::uuid, $2::jsonb)", [event.eventId, event.json])
                }
            }
            context.log("plain INSERT of the log's row, \(connections) connection(s)")
            let logRow = try concurrently(connections) { worker in
                let db = try Connection(url: url)
                for (i, event) in batches[worker].enumerated() {
                    let parameters: [(any PostgresEncodable)?] = [
                        event.eventId, connections * 100 + worker, i, event.type, event.occurredAt, event.app, event.platform,
                        event.osMajor, event.appVersion, event.attempt, event.permission, event.flow, event.payload]
                    try db.preparedQuery("""
                        insert into public.plain_log (event_id, stream_key, stream_version, type, occurred_at, app, platform, os_major,
                                               app_version, attempt, permission, flow, payload)
                        values ($1::uuid, $2, $3, $4, $5::timestamptz, $6, $7, $8, $9, $10::uuid, $11, $12, $13::jsonb)
                        """, parameters)
                }
            }
            context.log("write-path floor, \(connections) connection(s)")
            let floor = try concurrently(connections) { worker in
                let db = try Connection(url: url)
                for event in batches[worker] {
                    try db.preparedQuery("select * from public.floor_append($1::jsonb)", ["[" + event.json + "]"])
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
            results.append([
                BenchmarkRow(name: "plain INSERT, \(connections) conn (reference)", count: total, seconds: insert),
                BenchmarkRow(name: "plain INSERT of the log's row into a table with its indexes, \(connections) conn", count: total, seconds: logRow),
                BenchmarkRow(name: "write-path floor: PL/pgSQL over a one-event JSON array, no checks, \(connections) conn", count: total,
                             seconds: floor, note: "not a product path"),
                BenchmarkRow(name: "audit.append_events, \(connections) conn", count: total, seconds: append),
            ])
        }
        return results
    }

}

/// The log's columns and indexes on a plain table (no checks, no triggers, no link table), and
/// the floor of a write path: what `bench ingest` and `bench append` compare PermissionAudit with.
enum PlainLog {
    static func create(_ table: String, on db: Connection) throws {
        try db.execute("""
            create table \(table) (
                position bigint generated always as identity primary key,
                transaction_id xid8 not null default pg_current_xact_id(),
                event_id uuid not null unique, stream_key bigint not null, stream_version bigint not null,
                type text not null, occurred_at timestamptz not null, recorded_at timestamptz not null default now(),
                app text not null, platform text not null, os_major integer not null, app_version text not null,
                attempt uuid, permission text, flow text, payload jsonb not null,
                unique (stream_key, stream_version));
            create index on \(table) (transaction_id, position);
            """)
    }

    /// The least any write path over a JSON array of events does: a PL/pgSQL function whose one
    /// statement takes the events apart and inserts them into `floor_log` (versions from a
    /// sequence), answering one row per event as `audit.append_events` does. No check, no stream,
    /// no duplicate handling: not a product path, a measure of what the interface itself costs.
    static let floorFunction = """
        create sequence public.floor_version;
        create function public.floor_append(events jsonb) returns table (event_id uuid, "position" bigint, status text)
        language plpgsql as $$
        begin
            return query
            with inserted as (
                insert into public.floor_log as l (event_id, stream_key, stream_version, type, occurred_at, app, platform,
                                            os_major, app_version, attempt, permission, flow, payload)
                select (x.e->>'eventId')::uuid, 0, nextval('public.floor_version'), x.e->>'type', (x.e->>'occurredAt')::timestamptz,
                       x.e->>'app', x.e->>'platform', split_part(x.e->>'osVersion', '.', 1)::integer, x.e->>'appVersion',
                       (x.e->>'attempt')::uuid, x.e->>'permission', x.e->>'flow', x.e - 'subject'
                  from jsonb_array_elements(events) as x(e)
                returning l.event_id, l.position)
            select i.event_id, i.position, 'appended'::text from inserted i;
        end
        $$;
        """
}

/// Runs `body` for each of `workers` workers at once, each on a thread of its own; the
/// wall-clock seconds, or the first error. (Not `DispatchQueue.concurrentPerform`, which runs
/// about as many iterations at once as the machine has cores: 2 of 8 connections here.)
public func concurrently(_ workers: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws -> Double {
    let errors = ErrorBox()
    let finished = DispatchGroup()
    let seconds = measure {
        for worker in 0..<workers {
            finished.enter()
            Thread {
                defer { finished.leave() }
                do { try body(worker) } catch { errors.record(error) }
            }.start()
        }
        finished.wait()
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
