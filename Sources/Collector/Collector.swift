import EventLog
import Foundation
import MicroHTTP
import PermissionEvents
import Postgres

/// How a collector runs (the options of `permaudit serve`).
public struct CollectorConfiguration: Sendable {
    public var databaseURL: String
    /// Migration versions the database must have for /readyz (the files of `sql/`).
    public var requiredMigrations: Set<Int>
    public var host = "127.0.0.1"
    public var port: UInt16 = 8080
    /// HTTP server threads (libmicrohttpd's thread pool).
    public var threads = 4
    /// Database connections, each with one writer of the group commit.
    public var databaseConnections = 4
    /// Requests per second per API key (token bucket); 0 turns the limit off.
    public var rateLimit: Double = 100
    /// Requests a key may send at once before the rate applies.
    public var burst: Double = 200
    /// Seconds a connection may stay idle (also within a request) before it is closed.
    public var connectionTimeout = 10
    /// Most events in one group-commit transaction.
    public var maxEventsPerCommit = 2000
    /// Seconds a verified key is trusted before it is checked again (revocation delay).
    public var keyCacheSeconds: Double = 10
    /// `Retry-After` of a 503.
    public var retryAfterSeconds = 2
    /// Operational messages (never payloads, subjects or keys).
    public var log: @Sendable (String) -> Void = { _ in }

    public init(databaseURL: String, requiredMigrations: Set<Int>) {
        self.databaseURL = databaseURL
        self.requiredMigrations = requiredMigrations
    }
}

/// The HTTP collector: apps post wire-format events to `POST /v1/events` with their API key; the
/// valid ones are appended through the write path (`audit.append_events`), grouped with the
/// events of concurrent requests into one transaction, and every request is answered after its
/// events are committed, with one result per event. See docs/collector.md.
///
///     let collector = try Collector(configuration)
///     ...
///     collector.stop()
public final class Collector: @unchecked Sendable {
    // @unchecked Sendable: the parts are each thread-safe and set once in init; `server` is set
    // at the end of init and only read after.
    public static let maxBodyBytes = 1 << 20
    public static let maxEvents = 500
    /// How deep a request body may nest: the array, then events rejected one by one past 16 levels.
    public static let maxBodyDepth = 64
    public static let maxInflationRatio = 100

    public let configuration: CollectorConfiguration
    private let pool: ConnectionPool
    private let committer: GroupCommitter
    private let metrics = Metrics()
    private let limiter: RateLimiter
    private let keys: KeyCache
    private var server: HTTPServer?

    public init(_ configuration: CollectorConfiguration) throws {
        self.configuration = configuration
        pool = ConnectionPool(url: configuration.databaseURL, size: configuration.databaseConnections)
        committer = GroupCommitter(pool: pool, maxEvents: configuration.maxEventsPerCommit, metrics: metrics, log: configuration.log)
        limiter = RateLimiter(rate: configuration.rateLimit, burst: configuration.burst)
        keys = KeyCache(ttl: configuration.keyCacheSeconds)
        do {
            server = try HTTPServer(host: configuration.host, port: configuration.port, threads: configuration.threads,
                                    connectionTimeout: configuration.connectionTimeout,
                                    maxBodyBytes: Collector.maxBodyBytes,
                                    answeredByServer: { [metrics] status in metrics.refused(status: status) },
                                    admit: { [unowned self] request in
                let started = DispatchTime.now().uptimeNanoseconds
                guard let refusal = admit(&request) else { return nil }
                metrics.request(status: refusal.status, seconds: Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
                return refusal
            }) { [unowned self] request, respond in
                let started = DispatchTime.now().uptimeNanoseconds
                handle(request) { response in
                    self.metrics.request(status: response.status,
                                         seconds: Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
                    respond(response)
                }
            }
        } catch {
            committer.stop()
            throw error
        }
    }

    /// The port listened on (useful with port 0).
    public var port: UInt16 { server?.port ?? 0 }

    /// Stops accepting connections, answers every request already begun (new requests on open
    /// connections get 503), writes what is queued, then closes the database connections.
    public func stop() {
        server?.drain()
        committer.stop()
        server?.stop()
        server = nil
        pool.close()
    }

    // MARK: Routing

    func handle(_ request: HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        switch request.path {
        case "/v1/events":
            guard request.method == "POST" else { return respond(Self.methodNotAllowed("POST")) }
            postEvents(request, respond)
        case "/healthz":
            guard request.method == "GET" || request.method == "HEAD" else { return respond(Self.methodNotAllowed("GET, HEAD")) }
            respond(HTTPResponse(status: 200, contentType: "text/plain; charset=utf-8", text: "ok\n"))
        case "/readyz":
            guard request.method == "GET" || request.method == "HEAD" else { return respond(Self.methodNotAllowed("GET, HEAD")) }
            respond(readiness())
        case "/metrics":
            guard request.method == "GET" || request.method == "HEAD" else { return respond(Self.methodNotAllowed("GET, HEAD")) }
            respond(HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8",
                                 text: metrics.render(connectionsInUse: pool.inUse)))
        default:
            respond(Self.error(404, "no such resource; see docs/collector.md"))
        }
    }

    /// Ready when the database answers, has every migration of `sql/`, and takes appends (its
    /// transaction counter is past the log, 042).
    private func readiness() -> HTTPResponse {
        do {
            let (applied, behind) = try pool.withConnection(wait: 1, timeout: 2) { db -> (Set<Int>, Bool) in
                let exists: Bool = try db.query("select to_regclass('permaudit.schema_migrations') is not null").scalar()
                guard exists else { return ([], false) }
                let applied = Set(try db.query("select version from permaudit.schema_migrations").column(as: Int.self))
                guard configuration.requiredMigrations.isSubset(of: applied) else { return (applied, false) }
                return (applied, try db.query("select audit.transaction_counter_behind()").scalar(Bool.self))
            }
            let missing = configuration.requiredMigrations.subtracting(applied)
            guard missing.isEmpty else {
                return Self.error(503, "the database lacks \(missing.count) migrations; run 'permaudit migrate'",
                                  headers: [("Retry-After", "\(configuration.retryAfterSeconds)")])
            }
            guard !behind else {
                return Self.error(503, "the database refuses appends until its transaction counter is moved past the log (PA004; docs/deployment.md)",
                                  headers: [("Retry-After", "\(configuration.retryAfterSeconds)")])
            }
            return HTTPResponse(status: 200, contentType: "text/plain; charset=utf-8", text: "ready\n")
        } catch is DatabaseUnavailable {
            metrics.databaseError()
            return unavailable()
        } catch {
            // The database answers but refuses (e.g. a role without the writer's privileges).
            metrics.databaseError()
            let reason = GroupCommitter.oneLine(error)
            configuration.log("collector: not ready: \(reason)")
            return Self.error(503, "the database refuses the collector's queries: \(reason)",
                              headers: [("Retry-After", "\(configuration.retryAfterSeconds)")])
        }
    }

    // MARK: POST /v1/events

    private static let utf8Charsets: Set<String> = ["charset=utf-8", "charset=\"utf-8\"", "charset=utf8", "charset=\"utf8\""]

    private static let keyRequired = error(401, "an API key is required: 'Authorization: Bearer KEY'", headers: [("WWW-Authenticate", "Bearer")])

    enum ContentCoding { case identity, gzip }

    /// The body's one coding, or nil when it is one the collector does not decode.
    static func contentCoding(_ request: HTTPRequest) -> ContentCoding? {
        switch request.header("content-encoding")?.trimmingCharacters(in: .whitespaces).lowercased() {
        case nil, "", "identity": .identity
        case "gzip": .gzip
        default: nil
        }
    }

    /// What the headers of `POST /v1/events` decide, before its body is read (so that a request
    /// without a valid key is never read, decompressed or parsed, and a client that sent
    /// `Expect: 100-continue` never sends it): the key header, the content type and coding, the
    /// key (cached), the key's rate. Sets the request's principal to the key's app.
    func admit(_ request: inout HTTPRequest) -> HTTPResponse? {
        guard request.path == "/v1/events", request.method == "POST" else { return nil }
        guard let key = Self.bearerKey(request.header("authorization")) else {
            return Self.keyRequired
        }
        let contentType = (request.header("content-type") ?? "").split(separator: ";").map {
            $0.trimmingCharacters(in: .whitespaces).lowercased()
        }
        // JSON is UTF-8 (RFC 8259 section 8.1): a charset parameter may say so (`utf8` is a common
        // spelling of it), and nothing else.
        guard contentType.first == "application/json",
              contentType.dropFirst().allSatisfy({ !$0.hasPrefix("charset=") || Self.utf8Charsets.contains($0) }) else {
            return Self.error(415, "the body must be 'Content-Type: application/json' (UTF-8)")
        }
        guard Self.contentCoding(request) != nil else {
            return Self.error(415, "Content-Encoding must be gzip or identity (one coding)")
        }
        let app: String?
        do {
            app = try keys.app(for: key) { key in try pool.withConnection(wait: 1, timeout: 2) { try APIKeys.verify(key, on: $0) } }
        } catch let error as DatabaseUnavailable {
            metrics.databaseError()
            committer.databaseState(down: true, error)
            return unavailable()
        } catch {
            // The database answers but refuses the key check (e.g. a role without the writer's privileges).
            metrics.databaseError()
            configuration.log("collector: API key check failed: \(GroupCommitter.oneLine(error))")
            return Self.error(500, "internal error; the events were not stored")
        }
        guard let app else {
            return Self.error(401, "unknown or revoked API key", headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
        }
        if let wait = limiter.take(key) {
            return Self.error(429, "rate limit of this API key exceeded", headers: [("Retry-After", "\(wait)")])
        }
        request.principal = app
        return nil
    }

    /// The body of an admitted `POST /v1/events`.
    private func postEvents(_ request: HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) {
        guard let app = request.principal else {
            // Not admitted (the server runs `admit` before every handled request).
            return respond(Self.keyRequired)
        }
        var body = request.body
        if Self.contentCoding(request) == .gzip {
            do {
                body = try Gzip.decompress(body, limit: Self.maxBodyBytes, maxRatio: Self.maxInflationRatio)
            } catch {
                switch error {
                case .tooLarge, .ratio: return respond(Self.error(413, error.description))
                case .corrupt: return respond(Self.error(400, error.description))
                }
            }
        }
        let parsed: JSONParser.Sized
        do {
            // Deeper than an event may nest, so that one too-deep event is rejected on its own
            // (by the validator) and its valid neighbours stored; bounded, against stack exhaustion.
            parsed = try body.withUnsafeBufferPointer { try JSONParser.parseSized(bytes: $0, maxDepth: Self.maxBodyDepth) }
        } catch let error as JSONSyntaxError where error.isTooDeep {
            return respond(Self.error(400, "the body nests deeper than \(Self.maxBodyDepth) levels"))
        } catch {
            return respond(Self.error(400, "malformed JSON: \(error)"))
        }
        guard case let .array(elements) = parsed.value else {
            return respond(Self.error(400, "the body must be a JSON array of events"))
        }
        guard !elements.isEmpty else { return respond(Self.error(400, "the array holds no events")) }
        guard elements.count <= Self.maxEvents else {
            return respond(Self.error(413, "at most \(Self.maxEvents) events per request, got \(elements.count)"))
        }

        // Another app's events refuse the batch; a malformed `app` is the event's own error (below).
        let foreign = elements.indices.filter { elements[$0]["app"]?.stringValue.map { $0 != app && EventValidator.isApp($0) } ?? false }
        guard foreign.isEmpty else {
            return respond(Self.error(403, "this API key may only write events of its own app; nothing was stored",
                                      extra: ",\"indices\":[\(foreign.map(String.init).joined(separator: ","))]"))
        }

        // Validate here (the 24 h rule against the database's clock); the valid events go to the
        // write path, which checks them again.
        let validator = EventValidator(now: Date().addingTimeInterval(pool.clockOffset))
        var results: [EventResult?] = []
        var ids: [String?] = []
        var valid: [String] = []
        var validIds = Set<String>()
        var rejected: [RejectedGroup: Int] = [:]
        for (element, sentLength) in zip(elements, parsed.elementSentLengths) {
            ids.append(element["eventId"]?.stringValue)
            switch validator.validate(element, sentLength: sentLength) {
            case let .success(event):
                results.append(nil)
                valid.append(element.serialized)
                validIds.insert(event.eventId.uuidString.lowercased())
            case let .failure(problem):
                results.append(.rejected(field: problem.field, rule: problem.rule))
                rejected[RejectedGroup(element), default: 0] += 1
            }
        }
        let metrics = metrics
        let (checked, eventIds) = (results, ids)
        let retryAfter = configuration.retryAfterSeconds
        committer.submit(Submission(events: valid, ids: validIds, rejected: rejected) { outcome in
            switch outcome {
            case let .success(stored):
                var next = stored.makeIterator()
                let all = checked.map { $0 ?? next.next()! }
                metrics.events(all)
                respond(Self.resultsResponse(all, ids: eventIds))
            case let .failure(error) where error is DatabaseUnavailable:
                respond(Self.error(503, "the database is unavailable; retry later", headers: [("Retry-After", "\(retryAfter)")]))
            case let .failure(error as PostgresError) where error.code == .transactionCounterBehind:
                // The operator's to fix (the log names it), not the app's: the events can come again.
                respond(Self.error(503, "the database cannot store events until its operator repairs it; retry later",
                                   headers: [("Retry-After", "\(retryAfter)")]))
            case .failure:
                respond(Self.error(500, "internal error; the events were not stored"))
            }
        })
    }

    private func unavailable() -> HTTPResponse {
        Self.error(503, "the database is unavailable; retry later", headers: [("Retry-After", "\(configuration.retryAfterSeconds)")])
    }

    /// `Bearer KEY` -> KEY.
    static func bearerKey(_ header: String?) -> String? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let key = parts[1].trimmingCharacters(in: .whitespaces)
        return key.isEmpty || key.utf8.count > 256 ? nil : key
    }

    static func resultsResponse(_ results: [EventResult], ids: [String?]) -> HTTPResponse {
        var appended = 0, duplicates = 0, rejected = 0
        var items: [String] = []
        items.reserveCapacity(results.count)
        for (index, result) in results.enumerated() {
            var item = "{\"index\":\(index)"
            // Only a well-formed id is echoed (it is the client's own idempotency key).
            if let id = ids[index], UUID(uuidString: id) != nil { item += ",\"eventId\":\"\(id)\"" }
            switch result {
            case .appended:
                appended += 1
                item += ",\"status\":\"appended\"}"
            case .duplicate:
                duplicates += 1
                item += ",\"status\":\"duplicate\"}"
            case let .rejected(field, rule):
                rejected += 1
                item += ",\"status\":\"rejected\",\"field\":"
                JSONValue.writeQuoted(field, to: &item)
                item += ",\"rule\":"
                JSONValue.writeQuoted(rule, to: &item)
                item += "}"
            }
            items.append(item)
        }
        let text = "{\"appended\":\(appended),\"duplicates\":\(duplicates),\"rejected\":\(rejected),\"results\":[\n"
            + items.joined(separator: ",\n") + "\n]}\n"
        return HTTPResponse(status: 200, contentType: "application/json", text: text)
    }

    static func error(_ status: Int, _ message: String, headers: [(String, String)] = [], extra: String = "") -> HTTPResponse {
        var text = "{\"error\":"
        JSONValue.writeQuoted(message, to: &text)
        text += extra + "}\n"
        return HTTPResponse(status: status, contentType: "application/json", text: text, headers: headers)
    }

    static func methodNotAllowed(_ allowed: String) -> HTTPResponse {
        error(405, "method not allowed; allowed: \(allowed)", headers: [("Allow", allowed)])
    }
}
