import Foundation

/// The collector's counters, rendered in the Prometheus text format
/// (https://prometheus.io/docs/instrumenting/exposition_formats/).
final class Metrics: @unchecked Sendable {
    // @unchecked Sendable: every field is guarded by `lock`.
    static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    private let lock = NSLock()
    private var requests: [Int: Int] = [:]
    private var appended = 0
    private var duplicates = 0
    private var rejected = 0
    private var latencyCounts = [Int](repeating: 0, count: Metrics.latencyBuckets.count)
    private var latencySum = 0.0
    private var latencyCount = 0
    private var databaseErrors = 0
    private var batches = 0
    private var batchRequests = 0
    private var batchEvents = 0

    func request(status: Int, seconds: Double) {
        lock.lock()
        defer { lock.unlock() }
        requests[status, default: 0] += 1
        latencySum += seconds
        latencyCount += 1
        if let bucket = Metrics.latencyBuckets.firstIndex(where: { seconds <= $0 }) { latencyCounts[bucket] += 1 }
    }

    /// A request the HTTP server answered itself (too large, ambiguous, stopping): counted by
    /// status, outside the latency histogram (its body was never handled).
    func refused(status: Int) {
        lock.lock()
        requests[status, default: 0] += 1
        lock.unlock()
    }

    func events(_ results: [EventResult]) {
        lock.lock()
        defer { lock.unlock() }
        for result in results {
            switch result {
            case .appended: appended += 1
            case .duplicate: duplicates += 1
            case .rejected: rejected += 1
            }
        }
    }

    func databaseError() {
        lock.lock()
        databaseErrors += 1
        lock.unlock()
    }

    func batch(requests: Int, events: Int) {
        lock.lock()
        batches += 1
        batchRequests += requests
        batchEvents += events
        lock.unlock()
    }

    func render(connectionsInUse: Int) -> String {
        lock.lock()
        defer { lock.unlock() }
        var text = """
            # HELP permaudit_collector_requests_total HTTP requests answered, by status code.
            # TYPE permaudit_collector_requests_total counter

            """
        for (code, count) in requests.sorted(by: { $0.key < $1.key }) {
            text += "permaudit_collector_requests_total{code=\"\(code)\"} \(count)\n"
        }
        text += """
            # HELP permaudit_collector_events_total Events of POST /v1/events, by result.
            # TYPE permaudit_collector_events_total counter
            permaudit_collector_events_total{result="appended"} \(appended)
            permaudit_collector_events_total{result="duplicate"} \(duplicates)
            permaudit_collector_events_total{result="rejected"} \(rejected)
            # HELP permaudit_collector_request_duration_seconds Time from a complete request to its response.
            # TYPE permaudit_collector_request_duration_seconds histogram

            """
        var cumulative = 0
        for (bound, count) in zip(Metrics.latencyBuckets, latencyCounts) {
            cumulative += count
            text += "permaudit_collector_request_duration_seconds_bucket{le=\"\(bound)\"} \(cumulative)\n"
        }
        text += """
            permaudit_collector_request_duration_seconds_bucket{le="+Inf"} \(latencyCount)
            permaudit_collector_request_duration_seconds_sum \(latencySum)
            permaudit_collector_request_duration_seconds_count \(latencyCount)
            # HELP permaudit_collector_database_errors_total Failed database calls (unreachable, lost connection, errors).
            # TYPE permaudit_collector_database_errors_total counter
            permaudit_collector_database_errors_total \(databaseErrors)
            # HELP permaudit_collector_commits_total Transactions of the group commit.
            # TYPE permaudit_collector_commits_total counter
            permaudit_collector_commits_total \(batches)
            # HELP permaudit_collector_committed_requests_total Requests written by those transactions.
            # TYPE permaudit_collector_committed_requests_total counter
            permaudit_collector_committed_requests_total \(batchRequests)
            # HELP permaudit_collector_committed_events_total Events sent to the write path by those transactions.
            # TYPE permaudit_collector_committed_events_total counter
            permaudit_collector_committed_events_total \(batchEvents)
            # HELP permaudit_collector_database_connections_in_use Database connections checked out now.
            # TYPE permaudit_collector_database_connections_in_use gauge
            permaudit_collector_database_connections_in_use \(connectionsInUse)

            """
        return text
    }
}

/// A token bucket per API key: `rate` requests per second on average, bursts up to `burst`.
final class RateLimiter: @unchecked Sendable {
    // @unchecked Sendable: `buckets` is guarded by `lock`.
    let rate: Double
    let burst: Double
    private let lock = NSLock()
    private var buckets: [String: (tokens: Double, updated: Double)] = [:]

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = max(burst, 1)
    }

    /// Takes one token for `key`: nil when allowed, else the seconds until a token is available.
    func take(_ key: String, now: Double = Date().timeIntervalSinceReferenceDate) -> Int? {
        guard rate > 0 else { return nil }
        lock.lock()
        defer { lock.unlock() }
        var bucket = buckets[key] ?? (burst, now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        defer { buckets[key] = bucket }
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
            return nil
        }
        return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
    }
}

/// Verified keys for `ttl` seconds (so a revocation takes effect within that time), unknown
/// keys too (so guessing costs no database call per request); at most 10,000 entries.
final class KeyCache: @unchecked Sendable {
    // @unchecked Sendable: `entries` is guarded by `lock`.
    let ttl: Double
    private let lock = NSLock()
    private var entries: [String: (app: String?, expires: Double)] = [:]

    init(ttl: Double) { self.ttl = ttl }

    /// The app of `key` (nil: unknown or revoked), from the cache or from `verify`.
    func app(for key: String, verify: (String) throws -> String?) rethrows -> String? {
        let now = Date().timeIntervalSinceReferenceDate
        lock.lock()
        if let entry = entries[key], entry.expires > now {
            lock.unlock()
            return entry.app
        }
        lock.unlock()
        let app = try verify(key)
        lock.lock()
        if entries.count >= 10_000 { entries.removeAll() }
        entries[key] = (app, now + ttl)
        lock.unlock()
        return app
    }
}
