import Benchmarks
import Collector
import EventLog
import Foundation
import MicroHTTP
import PermissionEvents
import Postgres
import TestSupport
import XCTest

/// The collector end to end: a real socket, a real database (a fresh copy of the migrated template).
final class CollectorTests: DatabaseTestCase {
    static let app = "com.example.app"
    var collectors: [Collector] = []

    override func tearDown() {
        for collector in collectors { collector.stop() }
        collectors = []
        super.tearDown()
    }

    static var migrations: Set<Int> {
        Set((try? Migrator(directory: TestDatabase.sqlDirectory).migrations.map(\.version)) ?? [])
    }

    func start(databaseURL: String? = nil, _ configure: (inout CollectorConfiguration) -> Void = { _ in }) throws -> Collector {
        var configuration = CollectorConfiguration(databaseURL: databaseURL ?? url, requiredMigrations: Self.migrations)
        configuration.port = 0
        configuration.threads = 2
        configuration.databaseConnections = 2
        configure(&configuration)
        let collector = try Collector(configuration)
        collectors.append(collector)
        return collector
    }

    func createKey(app: String = app) throws -> String {
        try APIKeys.create(app: app, on: try Connection(url: url)).key
    }

    static func post(_ client: HTTPClient, _ events: [String], key: String?, contentType: String = "application/json",
                     gzip: Bool = false) throws -> HTTPClient.Response {
        try post(client, body: Array(("[" + events.joined(separator: ",") + "]").utf8), key: key, contentType: contentType, gzip: gzip)
    }

    static func post(_ client: HTTPClient, body: [UInt8], key: String?, contentType: String = "application/json",
                     gzip: Bool = false) throws -> HTTPClient.Response {
        var headers = [("Content-Type", contentType)]
        if let key { headers.append(("Authorization", "Bearer \(key)")) }
        if gzip { headers.append(("Content-Encoding", "gzip")) }
        return try client.send("POST", "/v1/events", headers: headers, body: gzip ? Gzip.compress(body) : body)
    }

    /// The per-event results of a 200 response: (status, field) in order.
    static func results(_ response: HTTPClient.Response) throws -> [(status: String, field: String?)] {
        let value = try JSONParser.parse(response.text)
        guard case let .array(items)? = value["results"] else { throw HTTPClientError(description: "no results array in \(response.text)", connectionClosed: false) }
        return items.map { ($0["status"]?.stringValue ?? "", $0["field"]?.stringValue) }
    }

    func storedCount(_ ids: [UUID]) throws -> Int {
        let db = try Connection(url: url)
        return try db.query("select count(*)::int from audit.events where event_id = any($1::uuid[])",
                            ["{" + ids.map { $0.uuidString.lowercased() }.joined(separator: ",") + "}"]).scalar()
    }

    // MARK: POST /v1/events

    func testPartialBatchStoresTheValidEventsAndRejectsTheOthersByFieldAndRule() throws {
        let key = try createKey()
        let client = try HTTPClient(port: try start().port)
        let good = [UUID(), UUID(), UUID()]
        let events = [
            EventFixtures.event(id: good[0], app: Self.app),
            EventFixtures.event(app: Self.app, occurredAt: "2026-10-03 09:15:27"),
            EventFixtures.event(id: good[1], subject: "inst-2", app: Self.app),
            EventFixtures.event(app: Self.app, removing: ["platform"]),
            EventFixtures.event(id: good[2], type: "picker.completed", app: Self.app),
            // Nested deeper than 16 levels: this event is rejected, not the whole request.
            EventFixtures.event(app: Self.app, overrides: ["attributes": String(repeating: "{\"a\":", count: 17) + "1" + String(repeating: "}", count: 17)]),
            // 16,385 bytes as sent, 16,284 of them compact: over the size limit.
            EventFixtures.padded(compactBytes: 16_284, spaces: 101, app: Self.app),
        ]
        let response = try Self.post(client, events, key: key)
        XCTAssertEqual(response.status, 200, response.text)
        let results = try Self.results(response)
        XCTAssertEqual(results.map(\.status), ["appended", "rejected", "appended", "rejected", "appended", "rejected", "rejected"])
        XCTAssertEqual(results[1].field, "occurredAt")
        XCTAssertEqual(results[3].field, "platform")
        XCTAssertEqual(results[5].field, "event")
        XCTAssertTrue(response.text.contains("nesting deeper than 16 levels"), response.text)
        XCTAssertEqual(results[6].field, "event")
        XCTAssertTrue(response.text.contains("must be at most 16 KiB of JSON"), response.text)
        XCTAssertTrue(response.text.contains("\"appended\":3,\"duplicates\":0,\"rejected\":4"), response.text)
        XCTAssertEqual(try storedCount(good), 3)
        let recorded: Int = try Connection(url: url).query("select coalesce(sum(rejected), 0)::int from audit.intake_anomalies").scalar()
        XCTAssertEqual(recorded, 4, "the rejected events are recorded with the valid ones")
        XCTAssertFalse(response.text.contains("inst-"), "no subject in a response")
    }

    func testTheSameBatchPostedTwiceStoresEachEventOnce() throws {
        let key = try createKey()
        let client = try HTTPClient(port: try start().port)
        let ids = (0..<50).map { _ in UUID() }
        let events = ids.enumerated().map { EventFixtures.event(id: $1, subject: "inst-\($0 % 7)", app: Self.app) }
        let first = try Self.post(client, events, key: key)
        XCTAssertEqual(try Self.results(first).map(\.status), Array(repeating: "appended", count: 50))
        let again = try Self.post(client, events, key: key, gzip: true)
        XCTAssertEqual(again.status, 200)
        XCTAssertEqual(try Self.results(again).map(\.status), Array(repeating: "duplicate", count: 50))
        XCTAssertEqual(try storedCount(ids), 50)
        // A conflicting re-use of an id is rejected with the field, the rest of the batch is stored.
        let other = UUID()
        let conflicting = [EventFixtures.event(id: ids[0], type: "permission.granted", app: Self.app), EventFixtures.event(id: other, app: Self.app)]
        let third = try Self.post(client, conflicting, key: key)
        XCTAssertEqual(try Self.results(third).map(\.status), ["rejected", "appended"], third.text)
        XCTAssertEqual(try Self.results(third)[0].field, "eventId")
        XCTAssertEqual(try storedCount(ids + [other]), 51)
    }

    /// A database restored into another cluster refuses appends until its counter is moved (042):
    /// the app is told to come again (503), not that it sent something wrong.
    func testATransactionCounterBehindTheLogIsRetryLater() throws {
        let key = try createKey()
        let client = try HTTPClient(port: try start().port)
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: key).status, 200)
        XCTAssertEqual(try client.send("GET", "/readyz").status, 200)
        try TestDatabase.addAnEventAheadOfTheTransactionCounter(try Connection(url: url))
        let refused = try Self.post(client, [EventFixtures.event(app: Self.app)], key: key)
        XCTAssertEqual(refused.status, 503, refused.text)
        XCTAssertNotNil(refused.headers["retry-after"])
        let ready = try client.send("GET", "/readyz")
        XCTAssertEqual(ready.status, 503, "a load balancer sends the apps elsewhere")
        XCTAssertTrue(ready.text.contains("PA004"), ready.text)
    }

    func testEachRefusalHasItsStatusCode() throws {
        let key = try createKey()
        let collector = try start { $0.keyCacheSeconds = 0 }
        let client = try HTTPClient(port: collector.port)
        let event = EventFixtures.event(app: Self.app)

        let get = try client.send("GET", "/v1/events")
        XCTAssertEqual(get.status, 405)
        XCTAssertEqual(get.headers["allow"], "POST")
        XCTAssertEqual(try client.send("POST", "/metrics").status, 405)
        XCTAssertEqual(try client.send("GET", "/v2/events").status, 404)
        let anonymous = try Self.post(client, [event], key: nil)
        XCTAssertEqual(anonymous.status, 401)
        XCTAssertEqual(anonymous.headers["www-authenticate"], "Bearer")
        XCTAssertEqual(try Self.post(client, [event], key: "pak_" + String(repeating: "0", count: 64)).status, 401)
        XCTAssertEqual(try Self.post(client, [event], key: key, contentType: "text/plain").status, 415)
        XCTAssertEqual(try Self.post(client, [event], key: key, contentType: "application/json; charset=latin-1").status, 415)
        XCTAssertEqual(try client.send("POST", "/v1/events", headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(key)"),
                                                                       ("Content-Encoding", "br")], body: Array("[\(event)]".utf8)).status, 415)
        let malformed = try Self.post(client, body: Array("[{\"eventId\": ".utf8), key: key)
        XCTAssertEqual(malformed.status, 400)
        XCTAssertTrue(malformed.text.contains("malformed JSON"), malformed.text)
        XCTAssertEqual(try Self.post(client, body: Array(event.utf8), key: key).status, 400, "an object, not an array")
        XCTAssertEqual(try Self.post(client, [], key: key).status, 400)
        let tooMany = try Self.post(client, Array(repeating: event, count: 501), key: key)
        XCTAssertEqual(tooMany.status, 413)

        // Another app's key: 403, and nothing of the batch is stored.
        let otherKey = try createKey(app: "com.example.other")
        let mine = UUID()
        let mixed = try Self.post(client, [EventFixtures.event(id: mine, app: "com.example.other"), event], key: otherKey)
        XCTAssertEqual(mixed.status, 403)
        XCTAssertTrue(mixed.text.contains("\"indices\":[1]"), mixed.text)
        XCTAssertEqual(try storedCount([mine]), 0)
        // A malformed app is that event's error, not another app's: the rest of the batch is stored.
        let malformedApp = try Self.post(client, [EventFixtures.event(id: mine, app: "com.example.other"),
                                                  EventFixtures.event(app: "com example other")], key: otherKey)
        XCTAssertEqual(malformedApp.status, 200, malformedApp.text)
        XCTAssertTrue(malformedApp.text.contains("\"appended\":1,\"duplicates\":0,\"rejected\":1"), malformedApp.text)
        XCTAssertTrue(malformedApp.text.contains("\"field\":\"app\""), malformedApp.text)
        XCTAssertEqual(try storedCount([mine]), 1)

        // A revoked key: 401.
        let db = try Connection(url: url)
        let revokedId = try APIKeys.list(on: db).first { $0.app == "com.example.other" }!.id
        XCTAssertTrue(try APIKeys.revoke(id: revokedId, on: db))
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: "com.example.other")], key: otherKey).status, 401)
        XCTAssertEqual(try Self.post(client, [event], key: key).status, 200)

        let metrics = try client.send("GET", "/metrics")
        XCTAssertEqual(metrics.status, 200)
        for line in ["permaudit_collector_requests_total{code=\"401\"} 3", "permaudit_collector_requests_total{code=\"403\"} 1",
                     "permaudit_collector_requests_total{code=\"200\"} 2", "permaudit_collector_events_total{result=\"appended\"} 2",
                     "permaudit_collector_events_total{result=\"rejected\"} 1", "permaudit_collector_request_duration_seconds_count 16"] {
            XCTAssertTrue(metrics.text.contains(line + "\n"), line + "\n" + metrics.text)
        }
    }

    /// JSON is UTF-8: a charset parameter may say so in any of its usual spellings.
    func testACharsetParameterNamingUTF8IsAccepted() throws {
        let key = try createKey()
        let client = try HTTPClient(port: try start().port)
        for charset in ["utf-8", "UTF-8", "\"utf-8\"", "utf8", "UTF8"] {
            XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: key,
                                         contentType: "application/json; charset=\(charset)").status, 200, charset)
        }
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: key,
                                     contentType: "application/json; charset=utf-16").status, 415)
    }

    func testRateLimitAnswers429WithRetryAfterPerKey() throws {
        let key = try createKey(), second = try createKey()
        let client = try HTTPClient(port: try start { $0.rateLimit = 0.2; $0.burst = 2 }.port)
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: key).status, 200)
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: key).status, 200)
        let limited = UUID()
        let third = try Self.post(client, [EventFixtures.event(id: limited, app: Self.app)], key: key)
        XCTAssertEqual(third.status, 429)
        XCTAssertEqual(third.headers["retry-after"], "5")
        XCTAssertEqual(try storedCount([limited]), 0)
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: second).status, 200, "each key has its own bucket")
    }

    // MARK: Limits that never reach the database

    /// The collector's database does not exist: what the headers alone refuse is refused without
    /// it (413 for the size, 401 without a key); a request with a key gets 503 before its body is
    /// read, and the process keeps serving.
    func testHeaderLimitsAreRefusedWithoutTheDatabase() throws {
        let missing = "postgresql:///no_such_database?host=/nonexistent&user=nobody"
        let client = try HTTPClient(port: try start(databaseURL: missing).port)
        let key = "pak_" + String(repeating: "a", count: 64)

        let large = [UInt8]("[".utf8) + [UInt8](repeating: 0x20, count: 1 << 20) + [UInt8]("]".utf8)
        let oversized = try Self.post(client, body: large, key: key)
        XCTAssertEqual(oversized.status, 413)
        // A Content-Length past Int's range, which libmicrohttpd would read on (up to 2^64 - 1),
        // is refused before the body, as any over 1 MiB.
        for length in ["9223372036854775808", "18446744073709551615"] {
            let raw = try HTTPClient(port: client.port)
            try raw.write(Array("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(length)\r\n\r\n[1]".utf8))
            let refused = try raw.readResponse()
            XCTAssertEqual(refused.status, 413, length)
            XCTAssertTrue(refused.text.contains("larger than 1048576"), refused.text)
        }
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(app: Self.app)], key: nil).status, 401)

        // The headers only: the 503 comes without the body.
        let raw = try HTTPClient(port: client.port)
        try raw.write(Array("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\nContent-Length: 1000\r\n\r\n".utf8))
        let unavailable = try raw.readResponse()
        XCTAssertEqual(unavailable.status, 503)
        XCTAssertEqual(unavailable.headers["retry-after"], "2")
        XCTAssertEqual(unavailable.headers["connection"], "close")
        XCTAssertEqual(try client.send("GET", "/healthz").status, 200)
        XCTAssertEqual(try client.send("GET", "/readyz").status, 503)
    }

    /// A request refused by its headers (no key, an unknown key, a type or coding the collector
    /// does not take) is answered before its body is sent, and its connection closed: nothing of
    /// the body is read, decompressed or parsed. A client that asks first (`Expect: 100-continue`)
    /// sends its body only when the key is good.
    func testARequestRefusedByItsHeadersIsAnsweredBeforeItsBody() throws {
        let key = try createKey()
        let port = try start().port
        let head = "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n"
        let cases: [(String, Int)] = [
            ("Content-Type: application/json\r\n", 401),
            ("Content-Type: application/json\r\nAuthorization: Bearer pak_\(String(repeating: "0", count: 64))\r\nExpect: 100-continue\r\n", 401),
            ("Content-Type: text/plain\r\nAuthorization: Bearer \(key)\r\n", 415),
            ("Content-Type: application/json\r\nContent-Encoding: br\r\nAuthorization: Bearer \(key)\r\n", 415),
        ]
        for (headers, status) in cases {
            let client = try HTTPClient(port: port, timeout: 5)
            try client.write(Array((head + headers + "\r\n").utf8))
            let response = try client.readResponse()
            XCTAssertEqual(response.status, status, headers)
            XCTAssertEqual(response.headers["connection"], "close", headers)
        }
        // What follows the headers of a refused request is never read as another request.
        let hidden = UUID()
        let hiddenBody = "[\(EventFixtures.event(id: hidden, app: Self.app))]"
        let hiddenRequest = "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\n"
            + "Content-Length: \(hiddenBody.utf8.count)\r\n\r\n" + hiddenBody
        let smuggler = try HTTPClient(port: port, timeout: 5)
        try smuggler.write(Array(("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  + "Content-Length: \(hiddenRequest.utf8.count)\r\n\r\n" + hiddenRequest).utf8))
        XCTAssertTrue(smuggler.waitForClose(timeout: 5), "the connection ends after the 401")
        XCTAssertEqual(try storedCount([hidden]), 0)

        let id = UUID()
        let body = Array("[\(EventFixtures.event(id: id, app: Self.app))]".utf8)
        let client = try HTTPClient(port: port, timeout: 5)
        try client.write(Array(("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\n"
                                + "Expect: 100-continue\r\nContent-Length: \(body.count)\r\n\r\n").utf8))
        XCTAssertEqual(try client.readResponse().status, 100)
        try client.write(body)
        let stored = try client.readResponse()
        XCTAssertEqual(stored.status, 200, stored.text)
        XCTAssertEqual(try storedCount([id]), 1)
    }

    /// Gzip bodies past the size or ratio limit, or not gzip at all, are refused after the key
    /// check, and nothing of them is stored.
    func testGzipBombsAreRefusedAndStoreNothing() throws {
        let key = try createKey()
        let client = try HTTPClient(port: try start().port)
        let headers = [("Content-Type", "application/json"), ("Authorization", "Bearer \(key)"), ("Content-Encoding", "gzip")]
        // 16 MiB of spaces compress to ~16 KiB: refused at 1 MiB of output.
        let bomb = Gzip.compress([UInt8](repeating: 0x20, count: 16 << 20))
        XCTAssertLessThan(bomb.count, 1 << 20)
        let bombed = try client.send("POST", "/v1/events", headers: headers, body: bomb)
        XCTAssertEqual(bombed.status, 413)
        XCTAssertTrue(bombed.text.contains("larger than 1048576"), bombed.text)
        // Under 1 MiB decompressed, but a ratio no JSON batch has.
        let events = String(repeating: EventFixtures.event(app: Self.app) + ",", count: 400)
        let dense = Array(("[" + events + String(repeating: " ", count: 800_000) + "1]").utf8)
        let inflated = try client.send("POST", "/v1/events", headers: headers, body: Gzip.compress(dense))
        XCTAssertEqual(inflated.status, 413)
        XCTAssertTrue(inflated.text.contains("times its compressed size"), inflated.text)
        XCTAssertEqual(try client.send("POST", "/v1/events", headers: headers, body: Array("not gzip".utf8)).status, 400)
        let stored: Int = try Connection(url: url).query("select count(*)::int from audit.events").scalar()
        XCTAssertEqual(stored, 0)
    }

    /// Requests whose framing or key is ambiguous (request smuggling: a second request hidden in
    /// the body under one of two lengths) are refused before their body, and their connection
    /// closed: neither the outer nor the hidden request is stored.
    func testAmbiguousRequestsAreRefusedAndTheirConnectionClosed() throws {
        let key = try createKey()
        let collector = try start()
        let outer = UUID(), hidden = UUID()
        let hiddenBody = "[\(EventFixtures.event(id: hidden, app: Self.app))]"
        let hiddenRequest = "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\n"
            + "Content-Length: \(hiddenBody.utf8.count)\r\n\r\n" + hiddenBody
        let outerBody = "[\(EventFixtures.event(id: outer, app: Self.app))]" + hiddenRequest
        let head = "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\n"
        let cases: [(String, String)] = [
            ("Content-Length: \(outerBody.utf8.count - hiddenRequest.utf8.count)\r\nContent-Length: \(outerBody.utf8.count)\r\n",
             "more than one content-length header"),
            ("Content-Length: \(outerBody.utf8.count)\r\nContent-Length: \(outerBody.utf8.count - hiddenRequest.utf8.count)\r\n",
             "more than one content-length header"),
            ("Content-Length: \(outerBody.utf8.count)\r\nTransfer-Encoding: chunked\r\n", "both content-length and transfer-encoding"),
            ("Authorization: Bearer pak_\(String(repeating: "0", count: 64))\r\nContent-Length: \(outerBody.utf8.count)\r\n",
             "more than one authorization header"),
            // No Content-Length to the server (an empty body), but one to a lenient proxy.
            ("Content-Length : \(outerBody.utf8.count)\r\n", "a header name holds white space"),
            ("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", "the only transfer-encoding accepted is chunked"),
            // White space after the coding: chunked to a proxy, a body up to the connection's end
            // to libmicrohttpd (which then answered nothing until the time-out).
            ("Transfer-Encoding: chunked \r\n", "the only transfer-encoding accepted is chunked"),
            ("Transfer-Encoding: chunked\t\r\n", "the only transfer-encoding accepted is chunked"),
            ("Transfer-Encoding: chun\u{212A}ed\r\n", "the only transfer-encoding accepted is chunked"),  // the Kelvin sign
            // Folded lines (obs-fold): no length or coding to the server, one to a proxy that unfolds.
            ("Content-Length:\r\n \(outerBody.utf8.count)\r\n", "folded over two lines"),
            ("Transfer-Encoding:\r\n chunked\r\nContent-Length: \(outerBody.utf8.count - hiddenRequest.utf8.count)\r\n", "folded over two lines"),
        ]
        for (headers, reason) in cases {
            let client = try HTTPClient(port: collector.port)
            try client.write(Array((head + headers + "\r\n" + outerBody).utf8))
            let response = try client.readResponse()
            XCTAssertEqual(response.status, 400, headers)
            XCTAssertTrue(response.text.contains(reason), response.text)
            XCTAssertEqual(response.headers["connection"], "close", headers)
        }
        XCTAssertEqual(try storedCount([outer, hidden]), 0)
        let hostless = try HTTPClient(port: collector.port)
        try hostless.write(Array("GET /healthz HTTP/1.1\r\n\r\n".utf8))
        XCTAssertEqual(try hostless.readResponse().status, 400, "HTTP/1.1 without Host")
        // The absolute form of a target (as sent to proxies) names the same resource.
        let absolute = try HTTPClient(port: collector.port)
        try absolute.write(Array("GET HTTP://127.0.0.1:\(collector.port)/healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        XCTAssertEqual(try absolute.readResponse().status, 200, "absolute-form target")
        // Escapes are decoded, but for %00: a NUL would end the path there for the server only.
        let escaped = try HTTPClient(port: collector.port)
        XCTAssertEqual(try escaped.send("GET", "/%68ealthz").status, 200)
        XCTAssertEqual(try escaped.send("GET", "/healthz%00.png").status, 404)
        XCTAssertEqual(try escaped.send("GET", "/metrics%00").status, 404)
        XCTAssertEqual(try escaped.send("GET", "/healthz%2").status, 404)

        // A list field's repeated lines are one list (RFC 9110 section 5.3): gzip twice is an
        // encoding the collector does not decode.
        let client = try HTTPClient(port: collector.port)
        let twice = try client.send("POST", "/v1/events", headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(key)"),
                                                                     ("Content-Encoding", "gzip"), ("Content-Encoding", "gzip")],
                                    body: Gzip.compress(Gzip.compress(Array("[\(EventFixtures.event(id: outer, app: Self.app))]".utf8))))
        XCTAssertEqual(twice.status, 415, twice.text)
        XCTAssertEqual(try Self.post(client, [EventFixtures.event(id: outer, app: Self.app)], key: key).status, 200)
        XCTAssertEqual(try storedCount([outer, hidden]), 1)
        let metrics = try client.send("GET", "/metrics").text
        for line in ["permaudit_collector_requests_total{code=\"400\"} 11", "permaudit_collector_requests_total{code=\"415\"} 1",
                     "permaudit_collector_request_duration_seconds_count 7"] {
            XCTAssertTrue(metrics.contains(line + "\n"), line + "\n" + metrics)
        }
    }

    /// A gzip body of several members (written by appending) is their concatenation; bytes after
    /// a member that are not another member are refused.
    func testGzipBodiesOfSeveralMembersAreDecodedWhole() throws {
        let key = try createKey()
        let client = try HTTPClient(port: try start().port)
        let ids = [UUID(), UUID()]
        let body = Array("[\(EventFixtures.event(id: ids[0], app: Self.app)),\(EventFixtures.event(id: ids[1], app: Self.app))]".utf8)
        let headers = [("Content-Type", "application/json"), ("Authorization", "Bearer \(key)"), ("Content-Encoding", "gzip")]
        let trailing = try client.send("POST", "/v1/events", headers: headers, body: Gzip.compress(body) + Array("junk".utf8))
        XCTAssertEqual(trailing.status, 400, trailing.text)
        XCTAssertEqual(try storedCount(ids), 0)
        let members = Gzip.compress(Array(body.prefix(100))) + Gzip.compress(Array(body.dropFirst(100)))
        let response = try client.send("POST", "/v1/events", headers: headers, body: members)
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertEqual(try storedCount(ids), 2)
    }

    /// The pool's connections all end at once (a server restart, here their backends terminated):
    /// the next request, key check included, connects anew instead of failing on a dead one.
    func testTheFirstRequestAfterLostConnectionsIsServed() throws {
        let key = try createKey()
        let collector = try start { $0.keyCacheSeconds = 0; $0.databaseConnections = 4 }
        let port = collector.port
        _ = try concurrently(4) { _ in   // several pooled connections
            guard let client = try? HTTPClient(port: port) else { return }
            _ = try? Self.post(client, [EventFixtures.event(app: Self.app)], key: key)
        }
        XCTAssertGreaterThan(try TestDatabase.terminateOtherClients(try Connection(url: url)), 1)
        let client = try HTTPClient(port: port)
        for _ in 0..<4 {
            let response = try Self.post(client, [EventFixtures.event(app: Self.app)], key: key)
            XCTAssertEqual(response.status, 200, response.text)
        }
    }

    func testReadyWhenMigratedAndNotBefore() throws {
        let client = try HTTPClient(port: try start().port)
        XCTAssertEqual(try client.send("GET", "/readyz").status, 200)
        let bare = try TestDatabase.create(migrated: false)
        defer { TestDatabase.drop(bare) }
        let unmigrated = try HTTPClient(port: try start(databaseURL: bare).port)
        let response = try unmigrated.send("GET", "/readyz")
        XCTAssertEqual(response.status, 503)
        XCTAssertTrue(response.text.contains("migrate"), response.text)
    }

    /// Started with a role that may not check keys (the analyst): not "unavailable" but refused,
    /// with PostgreSQL's reason on /readyz, a 500 for requests, and a log line for each.
    func testARoleWithoutTheWritersPrivilegesIsReportedAsSuch() throws {
        let key = try createKey()
        let lines = LockedLines()
        let collector = try start(databaseURL: url + "&options=-c%20role%3Dpermaudit_analyst") { $0.log = { lines.append($0) } }
        let client = try HTTPClient(port: collector.port)
        let ready = try client.send("GET", "/readyz")
        XCTAssertEqual(ready.status, 503)
        XCTAssertTrue(ready.text.contains("the database refuses the collector's queries: PostgreSQL 42501"), ready.text)
        let response = try Self.post(client, [EventFixtures.event(app: Self.app)], key: key)
        XCTAssertEqual(response.status, 500, response.text)
        XCTAssertEqual(lines.all.filter { $0.hasPrefix("collector: not ready: PostgreSQL 42501") }.count, 1, "\(lines.all)")
        XCTAssertEqual(lines.all.filter { $0.hasPrefix("collector: API key check failed: PostgreSQL 42501") }.count, 1, "\(lines.all)")
        XCTAssertFalse(lines.all.contains { $0.contains("unavailable") }, "\(lines.all)")
    }

    // MARK: Stalled clients

    /// A client that sends half a request and stalls is disconnected after the time-out, and it
    /// never holds the (only) database connection: others are served meanwhile.
    func testStalledClientsTimeOutWithoutHoldingADatabaseConnection() throws {
        let key = try createKey()
        let collector = try start { $0.connectionTimeout = 1; $0.databaseConnections = 1 }
        let halfBody = try HTTPClient(port: collector.port)
        let event = Array("[\(EventFixtures.event(app: Self.app))]".utf8)
        try halfBody.write(Array("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\nContent-Length: \(event.count)\r\n\r\n".utf8)
                           + event.prefix(event.count / 2))
        let halfHeaders = try HTTPClient(port: collector.port)
        try halfHeaders.write(Array("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Ty".utf8))

        let other = try HTTPClient(port: collector.port)
        XCTAssertEqual(try Self.post(other, [EventFixtures.event(app: Self.app)], key: key).status, 200)

        XCTAssertTrue(halfBody.waitForClose(timeout: 30), "the stalled body is cut off")
        XCTAssertTrue(halfHeaders.waitForClose(timeout: 30), "the stalled header is cut off")
        let stored: Int = try Connection(url: url).query("select count(*)::int from audit.events").scalar()
        XCTAssertEqual(stored, 1, "the half-sent event is not stored")
        XCTAssertEqual(try Self.post(other, [EventFixtures.event(app: Self.app)], key: key).status, 200)
    }

    // MARK: Group commit

    func testConcurrentRequestsAreEachAnsweredAfterTheirEventsAreCommitted() throws {
        let key = try createKey()
        let collector = try start { $0.threads = 4; $0.databaseConnections = 2 }
        let clients = 16, requests = 10
        let acknowledged = LockedIDs()
        let failures = LockedIDs()
        _ = try concurrently(clients) { c in
            guard let client = try? HTTPClient(port: collector.port) else { return failures.add([UUID()]) }
            for r in 0..<requests {
                let ids = (0..<20).map { _ in UUID() }
                let events = ids.map { EventFixtures.event(id: $0, subject: "inst-\(c)-\(r % 3)", app: Self.app) }
                guard let response = try? Self.post(client, events, key: key), response.status == 200 else { return failures.add(ids) }
                // Committed before the answer: visible to a new connection right now.
                acknowledged.add(ids)
            }
        }
        XCTAssertEqual(failures.count, 0)
        XCTAssertEqual(acknowledged.count, clients * requests * 20)
        XCTAssertEqual(try storedCount(acknowledged.all), acknowledged.count)
        let metrics = try HTTPClient(port: collector.port).send("GET", "/metrics").text
        XCTAssertTrue(metrics.contains("permaudit_collector_committed_requests_total \(clients * requests)\n"), metrics)
    }
}

extension CollectorTests {
    /// A stop while clients post: every request the server began is answered before it exits
    /// (so no stored request goes unanswered), and requests that come while it stops get 503 with
    /// Retry-After on their open connection, or find no listener.
    /// While a stop waits for a request in flight, a new connection is refused at once (it can go
    /// to another instance), not left unaccepted until the wait ends.
    func testAStoppingCollectorRefusesNewConnections() throws {
        let key = try createKey()
        let collector = try start()
        let port = collector.port
        let slow = try HTTPClient(port: port)
        try slow.write(Array(("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer \(key)\r\n"
                              + "Content-Length: 100\r\nExpect: 100-continue\r\n\r\n").utf8))
        XCTAssertEqual(try slow.readResponse().status, 100, "the request has begun")
        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async { collector.stop(); stopped.signal() }
        Thread.sleep(forTimeInterval: 0.5)
        let started = Date()
        XCTAssertThrowsError(try HTTPClient(port: port, timeout: 5).send("GET", "/healthz"))
        XCTAssertLessThan(Date().timeIntervalSince(started), 4, "refused, not left waiting")
        try slow.write(Array("[".utf8) + Array(String(repeating: " ", count: 98).utf8) + Array("]".utf8))
        let answer = try slow.readResponse()
        XCTAssertEqual(answer.status, 400, "the request in flight is still answered")
        XCTAssertTrue(answer.text.contains("the array holds no events"), answer.text)
        XCTAssertEqual(stopped.wait(timeout: .now() + 30), .success)
    }

    func testStopAnswersEveryRequestItBegan() throws {
        let key = try createKey()
        let collector = try start { $0.threads = 4; $0.databaseConnections = 2 }
        let port = collector.port
        let acknowledged = LockedIDs(), refused = LockedIDs(), unanswered = LockedIDs()
        let group = DispatchGroup()
        for c in 0..<12 {
            DispatchQueue.global().async(group: group) {
                guard let client = try? HTTPClient(port: port) else { return }
                for r in 0..<2_000 {
                    let ids = (0..<5).map { _ in UUID() }
                    let events = ids.map { EventFixtures.event(id: $0, subject: "inst-\(c)-\(r % 3)", app: Self.app) }
                    guard let response = try? Self.post(client, events, key: key) else { return unanswered.add(ids) }
                    if response.status == 200 {
                        acknowledged.add(ids)
                    } else {
                        XCTAssertEqual(response.status, 503, response.text)
                        XCTAssertNotNil(response.headers["retry-after"], response.text)
                        return refused.add(ids)
                    }
                }
            }
        }
        while acknowledged.count < 500 { Thread.sleep(forTimeInterval: 0.01) }
        collector.stop()
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertGreaterThan(refused.count + unanswered.count, 0, "the clients were still posting when it stopped")
        XCTAssertEqual(try storedCount(acknowledged.all), acknowledged.count)
        XCTAssertEqual(try storedCount(refused.all), 0)
        XCTAssertEqual(try storedCount(unanswered.all), 0, "a request without an answer was not stored")
    }
}

/// Event ids gathered by several threads.
final class LockedIDs: @unchecked Sendable {
    // @unchecked Sendable: `ids` is guarded by `lock`.
    private let lock = NSLock()
    private var ids: [UUID] = []
    func add(_ more: [UUID]) { lock.lock(); ids += more; lock.unlock() }
    var all: [UUID] { lock.lock(); defer { lock.unlock() }; return ids }
    var count: Int { all.count }
}

/// Log lines collected from the collector's threads.
final class LockedLines: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    func append(_ line: String) { lock.lock(); lines.append(line); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return lines }
}
