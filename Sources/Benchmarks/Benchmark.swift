import EventLog
import Foundation
import Postgres

/// Shared pieces of the benchmarks: a scratch database, timing, memory, and a result table.
public struct BenchmarkContext {
    /// URL of the server's maintenance database (the benchmark creates and drops its own databases).
    public var adminURL: String
    public var log: (String) -> Void

    public init(adminURL: String, log: @escaping (String) -> Void) {
        self.adminURL = adminURL
        self.log = log
    }

    /// A fresh, migrated database named `name`; returns its URL.
    public func freshDatabase(_ name: String, migrated: Bool = true, sqlDirectory: URL) throws -> String {
        let admin = try Connection(url: adminURL)
        try admin.execute("drop database if exists \(name) with (force)")
        try admin.execute("create database \(name)")
        let url = BenchmarkContext.replaceDatabase(in: adminURL, with: name)
        if migrated { try Migrator(directory: sqlDirectory).migrate(try Connection(url: url)) }
        return url
    }

    /// A copy of database `source` (which nobody may be connected to) named `name`; returns its URL.
    public func copyDatabase(_ source: String, as name: String) throws -> String {
        let admin = try Connection(url: adminURL)
        try admin.execute("drop database if exists \(name) with (force)")
        try admin.execute("create database \(name) template \(source)")
        return BenchmarkContext.replaceDatabase(in: adminURL, with: name)
    }

    public func dropDatabase(_ name: String) {
        let admin = try? Connection(url: adminURL)
        try? admin?.execute("drop database if exists \(name) with (force)")
    }

    static func replaceDatabase(in url: String, with name: String) -> String {
        // postgresql://user@host:port/db?params or postgresql:///db?params
        guard let schemeEnd = url.range(of: "://") else { return url + " dbname=\(name)" }
        let afterScheme = url[schemeEnd.upperBound...]
        let slash = afterScheme.firstIndex(of: "/") ?? afterScheme.endIndex
        let query = afterScheme[slash...].firstIndex(of: "?") ?? afterScheme.endIndex
        return String(url[..<slash]) + "/" + name + String(afterScheme[query...])
    }
}

/// One measured line of a benchmark table.
public struct BenchmarkRow: Sendable {
    public var name: String
    public var count: Int
    public var seconds: Double
    public var note: String = ""
    public var rate: Double { seconds > 0 ? Double(count) / seconds : 0 }

    public init(name: String, count: Int, seconds: Double, note: String = "") {
        self.name = name
        self.count = count
        self.seconds = seconds
        self.note = note
    }
}

public enum BenchmarkReport {
    /// A Markdown table: name, count, seconds, per second, ratio to `reference`.
    public static func table(_ rows: [BenchmarkRow], reference: String) -> String {
        let base = rows.first { $0.name == reference }?.rate ?? 0
        var text = "| measurement | events | seconds | events/s | vs reference | note |\n|---|---:|---:|---:|---:|---|\n"
        for row in rows {
            let ratio = base > 0 ? String(format: "%.2fx", row.rate / base) : "-"
            text += "| \(row.name) | \(row.count) | \(String(format: "%.2f", row.seconds)) | \(String(format: "%.0f", row.rate)) | \(ratio) | \(row.note) |\n"
        }
        return text
    }

    /// A one-line description of the machine, for BENCHMARKS.md.
    public static var machine: String {
        let cpu = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }?
            .split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "unknown CPU"
        let memory = ProcessInfo.processInfo.physicalMemory / (1 << 30)
        return "\(ProcessInfo.processInfo.activeProcessorCount) cores (\(cpu)), \(memory) GiB RAM"
    }
}

/// Wall-clock seconds of `body`.
public func measure(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

/// Peak resident memory of this process so far, in MiB.
public func peakResidentMiB() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024
}

/// Server backends whose memory `peakMemory` samples; one may join while it samples (the
/// projector's second connection for a one-pass build).
public final class ServerBackends: @unchecked Sendable {
    // @unchecked Sendable: `pids` is touched only under the lock.
    private let lock = NSLock()
    private var pids: [Int]
    public init(_ pids: [Int]) { self.pids = pids }
    public func add(_ pid: Int) { lock.withLock { pids.append(pid) } }
    var all: [Int] { lock.withLock { pids } }
}

/// The highest memory seen while `body` runs, sampled every 10 ms: this process's resident set
/// (VmRSS), and the private memory of local server backends, summed (RssAnon: what they
/// allocated, without the shared buffers they map; nil when no /proc entry is readable).
public func peakMemory(serverBackends backends: ServerBackends, during body: () throws -> Void) rethrows -> (clientMiB: Double, serverPrivateMiB: Double?) {
    final class Peaks: @unchecked Sendable {
        // @unchecked Sendable: every field is touched only under the lock.
        let lock = NSLock()
        var client = 0.0
        var server: Double?
        var done = false
        func sample(_ backends: ServerBackends) -> Bool {
            let c = currentResidentMiB()
            let s = backends.all.compactMap { procStatusMiB("\($0)", "RssAnon") }
            return lock.withLock {
                client = max(client, c)
                if !s.isEmpty { server = max(server ?? 0, s.reduce(0, +)) }
                return !done
            }
        }
    }
    let peaks = Peaks()
    let finished = DispatchSemaphore(value: 0)
    Thread {
        while peaks.sample(backends) { usleep(10_000) }
        finished.signal()
    }.start()
    defer {
        peaks.lock.withLock { peaks.done = true }
        finished.wait()
    }
    try body()
    _ = peaks.sample(backends)
    return peaks.lock.withLock { (peaks.client, peaks.server) }
}

/// A field of /proc/PID/status in MiB (`VmRSS:   1234 kB`), nil when not readable.
func procStatusMiB(_ pid: String, _ field: String) -> Double? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
          let kib = Double(line.split(separator: " ").dropFirst().first ?? "") else { return nil }
    return kib / 1024
}

/// Current resident memory of this process, in MiB (VmRSS; 0 when not readable).
public func currentResidentMiB() -> Double {
    procStatusMiB("self", "VmRSS") ?? 0
}
