import CMicroHTTPD
import Foundation

/// A request whose body has been received completely.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path without the query string.
    public var path: String
    /// Header names in lower case.
    public var headers: [String: String]
    public var body: [UInt8]
    /// Whom the server's admission check found the request to come from (the collector: the app
    /// of its API key); nil when no check set it.
    public var principal: String?

    public init(method: String, path: String, headers: [String: String] = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public init(status: Int, contentType: String, text: String, headers: [(String, String)] = []) {
        self.init(status: status, headers: [("Content-Type", contentType)] + headers, body: Array(text.utf8))
    }
}

/// Called once per request with its complete body; `respond` may be called later, from any
/// thread, exactly once. Until then the connection is suspended and holds no server thread.
public typealias HTTPHandler = @Sendable (HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) -> Void

/// Called once per request on a server thread when its headers are in and its body is not (the
/// request's `body` is empty): a response refuses the request there, before a byte of its body is
/// read, and its connection is closed (`Connection: close`); nil lets the body in. It may set the
/// request's `principal` for the handler.
public typealias HTTPAdmission = @Sendable (inout HTTPRequest) -> HTTPResponse?

public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

/// An HTTP/1.1 server on GNU libmicrohttpd (https://www.gnu.org/software/libmicrohttpd/manual/),
/// the only owner of its `MHD_Daemon`: a thread pool with epoll (or poll), bodies collected up to
/// `maxBodyBytes` (a larger body is answered 413 and never handed to the handler), an optional
/// admission check on the headers before the body is read, idle connections closed after
/// `connectionTimeout` seconds, and suspend/resume so that a handler can answer later without
/// holding a thread.
///
///     let server = try HTTPServer(host: "127.0.0.1", port: 0, threads: 4) { request, respond in
///         respond(HTTPResponse(status: 200, contentType: "text/plain", text: "ok\n"))
///     }
///     print(server.port)
public final class HTTPServer: @unchecked Sendable {
    // @unchecked Sendable: `daemon` is written in init and stop (which waits for the daemon's
    // threads) and `quiescedListener` in drain and stop (the owner calls them one after the
    // other); the counters and `draining` are guarded by `lock`; everything else is immutable.
    public let host: String
    public private(set) var port: UInt16 = 0
    public let maxBodyBytes: Int
    private let admit: HTTPAdmission?
    private let handler: HTTPHandler
    private let answeredByServer: @Sendable (Int) -> Void
    private var daemon: OpaquePointer?
    private let lock = NSCondition()
    private var awaitingResponse = 0
    /// Requests begun (headers received) and not completed (answer sent, or connection gone).
    private var openRequests = 0
    private var draining = false
    private var quiescedListener: Int32 = -1

    /// The IPv4 address a server can listen on for `host`: dotted decimal, or `localhost`.
    public static func ipv4Address(_ host: String) -> in_addr? {
        var address = in_addr()
        return inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address) == 1 ? address : nil
    }

    public init(host: String, port: UInt16, threads: Int, connectionTimeout: Int = 10, connectionLimit: Int = 1024,
                maxBodyBytes: Int = 1 << 20, answeredByServer: @escaping @Sendable (_ status: Int) -> Void = { _ in },
                admit: HTTPAdmission? = nil, handler: @escaping HTTPHandler) throws {
        self.host = host
        self.maxBodyBytes = maxBodyBytes
        self.answeredByServer = answeredByServer
        self.admit = admit
        self.handler = handler
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard let ipv4 = Self.ipv4Address(host) else {
            throw HTTPServerError(description: "'\(host)' is not an IPv4 address")
        }
        address.sin_addr = ipv4
        let flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_AUTO.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
        let context = Unmanaged.passUnretained(self).toOpaque()
        daemon = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                permaudit_mhd_start(flags, socketAddress, accessHandler, context, requestCompleted, context,
                                    UInt32(max(threads, 1)), UInt32(connectionTimeout), UInt32(connectionLimit), 64 * 1024,
                                    unescapeTarget)
            }
        }
        guard let daemon else {
            throw HTTPServerError(description: "cannot listen on \(host):\(port) (the port is in use, the address is not one of this machine's, or no permission)")
        }
        self.port = permaudit_mhd_bound_port(daemon)
    }

    /// Requests handed to the handler and not answered yet.
    public var pendingResponses: Int {
        lock.lock()
        defer { lock.unlock() }
        return awaitingResponse
    }

    /// The first half of a graceful stop: no new connection is accepted, a new request on an open
    /// connection is answered 503 (`Retry-After: 1`, `Connection: close`), and this waits (up to
    /// `timeout` seconds) until every request already begun has been answered and its answer sent.
    public func drain(timeout: Double = 30) {
        lock.lock()
        guard !draining, let daemon else { lock.unlock(); return }
        draining = true
        lock.unlock()
        // The listening socket, ours to close, but only after MHD_stop_daemon (its threads may
        // still look at it until then). Shut down for reading, it stops listening at once: a new
        // connection is refused (and can go to another instance) instead of waiting unaccepted
        // in the backlog until the drain ends.
        quiescedListener = MHD_quiesce_daemon(daemon)
        if quiescedListener >= 0 { _ = shutdown(quiescedListener, Int32(SHUT_RD)) }
        lock.lock()
        let deadline = Date().addingTimeInterval(timeout)
        while openRequests > 0, lock.wait(until: deadline) {}
        lock.unlock()
    }

    /// Waits (up to `timeout` seconds) until every handed-out request is answered, then stops the
    /// daemon and its threads. Open connections are closed (`drain` first to let them finish).
    public func stop(timeout: Double = 30) {
        lock.lock()
        let deadline = Date().addingTimeInterval(timeout)
        while awaitingResponse > 0, lock.wait(until: deadline) {}
        lock.unlock()
        if let daemon {
            MHD_stop_daemon(daemon)
            self.daemon = nil
        }
        if quiescedListener >= 0 {
            close(quiescedListener)
            quiescedListener = -1
        }
    }

    deinit { stop(timeout: 0) }

    // MARK: Callbacks (on the daemon's threads)

    fileprivate func handle(_ connection: OpaquePointer, url: String, method: String,
                            upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
                            state: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let existing = state.pointee else {
            // First call: the headers are in, the body is not.
            let (headers, ambiguity) = Self.headers(of: connection)
            let exchange = Exchange(connection: connection, server: self,
                                    request: HTTPRequest(method: method, path: url, headers: headers))
            state.pointee = Unmanaged.passRetained(exchange).toOpaque()
            lock.lock()
            openRequests += 1
            let refuse = draining
            lock.unlock()
            if refuse {
                exchange.phase = .answered
                return refuseRequest(connection, Self.stopping)
            }
            if let ambiguity {
                // Where the body ends, or whose request it is, is ambiguous (request smuggling):
                // refused before the body, and the connection closed with whatever follows.
                exchange.phase = .answered
                return refuseRequest(connection, Self.badRequest(ambiguity))
            }
            // Digits past Int's range (2^63 and more, which libmicrohttpd reads up to 2^64 - 1)
            // are too large too; other malformed values are libmicrohttpd's 400.
            if let text = exchange.request.header("content-length"), !text.isEmpty,
               text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), Int(text).map({ $0 > maxBodyBytes }) ?? true {
                exchange.phase = .answered
                return refuseRequest(connection, Self.tooLarge(maxBodyBytes))
            }
            if let admit, var refusal = admit(&exchange.request) {
                // The admission's refusals are its own to count. The body stays unread, so the
                // connection cannot carry another request.
                exchange.phase = .answered
                refusal.headers.removeAll { $0.0.lowercased() == "connection" }
                refusal.headers.append(("Connection", "close"))
                return Self.queue(connection, refusal)
            }
            return .YES
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            if exchange.phase == .receiving, let upload {
                if exchange.request.body.count + uploadSize.pointee > maxBodyBytes {
                    exchange.phase = .discarding
                    exchange.request.body = []
                } else {
                    upload.withMemoryRebound(to: UInt8.self, capacity: uploadSize.pointee) {
                        exchange.request.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: uploadSize.pointee))
                    }
                }
            }
            uploadSize.pointee = 0
            return .YES
        }
        switch exchange.phase {
        case .receiving:
            exchange.phase = .handling
            lock.lock()
            awaitingResponse += 1
            lock.unlock()
            let request = exchange.request
            exchange.request.body = []
            handler(request) { response in exchange.complete(response) }
            return exchange.answerOrSuspend()
        case .discarding:
            exchange.phase = .answered
            return refuseRequest(connection, Self.tooLarge(maxBodyBytes))
        case .handling, .suspended:
            return exchange.answerOrSuspend()
        case .answered:
            return .YES
        }
    }

    /// An answer of the server's own, without the handler (the caller counts it).
    private func refuseRequest(_ connection: OpaquePointer, _ response: HTTPResponse) -> MHD_Result {
        answeredByServer(response.status)
        return Self.queue(connection, response)
    }

    /// A request's end (MHD's completion callback): answered and sent, or its connection closed.
    fileprivate func completed() {
        lock.lock()
        openRequests -= 1
        lock.broadcast()
        lock.unlock()
    }

    static let stopping = HTTPResponse(status: 503, contentType: "application/json", text: "{\"error\":\"the server is stopping\"}\n",
                                       headers: [("Retry-After", "1"), ("Connection", "close")])

    fileprivate func answered() {
        lock.lock()
        awaitingResponse -= 1
        lock.broadcast()
        lock.unlock()
    }

    static func tooLarge(_ limit: Int) -> HTTPResponse {
        HTTPResponse(status: 413, contentType: "application/json",
                     text: "{\"error\":\"the body is larger than \(limit) bytes\"}\n", headers: [("Connection", "close")])
    }

    static func badRequest(_ reason: String) -> HTTPResponse {
        HTTPResponse(status: 400, contentType: "application/json",
                     text: "{\"error\":\"\(reason)\"}\n", headers: [("Connection", "close")])
    }

    /// Fields a request carries at most once (RFC 9110 section 5.3): a second line of one of them
    /// makes the request ambiguous (which length, which key?) and it is refused.
    private static let singletonFields: Set<String> = ["content-length", "content-type", "authorization", "host"]

    /// The request's header fields, names in lower case, repeated lines of a list field joined
    /// with ", " (RFC 9110 section 5.3); and why the request is ambiguous, if it is: white space
    /// in a field name (RFC 9112 section 5.1: "Content-Length :" is no Content-Length to the
    /// server, but may be one to a proxy), a framing field folded over two lines, a singleton
    /// field repeated, a transfer coding other than chunked, or both Content-Length and
    /// Transfer-Encoding (RFC 9112 section 6.3).
    private static func headers(of connection: OpaquePointer) -> (headers: [String: String], ambiguity: String?) {
        let box = HeaderBox()
        _ = MHD_get_connection_values(connection, .HEADER_KIND, { context, _, key, value in
            guard let context, let key else { return .YES }
            Unmanaged<HeaderBox>.fromOpaque(context).takeUnretainedValue()
                .add(String(cString: key), value.map { String(cString: $0) } ?? "")
            return .YES
        }, Unmanaged.passUnretained(box).toOpaque())
        if box.headers.keys.contains(where: { $0.contains(where: \.isWhitespace) }) {
            return (box.headers, "a header name holds white space")
        }
        // libmicrohttpd 0.9.75 appends a folded line (obs-fold, RFC 9112 section 5.2) to the field
        // name: "Content-Length:" then " 47" arrives as "content-length47" with an empty value,
        // no length to the server but one to a proxy that unfolds.
        if box.headers.keys.contains(where: { name in
            ["content-length", "transfer-encoding"].contains { name.hasPrefix($0) && name != $0 }
        }) {
            return (box.headers, "a content-length or transfer-encoding header is folded over two lines")
        }
        if let repeated = box.repeated.intersection(singletonFields).sorted().first {
            return (box.headers, "the request has more than one \(repeated) header")
        }
        // libmicrohttpd reads a body as chunked where the value is "chunked" in any ASCII case,
        // with no white space after it: any other value (trailing white space, or a letter that
        // lower-cases to an ASCII one, as the Kelvin sign to k, which it would read as a body up
        // to the end of the connection) is refused.
        if let coding = box.headers["transfer-encoding"] {
            if !coding.utf8.elementsEqual("chunked".utf8, by: { $0 | 0x20 == $1 }) {
                return (box.headers, "the only transfer-encoding accepted is chunked")
            }
            if box.headers["content-length"] != nil {
                return (box.headers, "the request has both content-length and transfer-encoding headers")
            }
        }
        return (box.headers, nil)
    }

    /// Creates, queues and frees one `MHD_Response` (MHD keeps its own reference until sent).
    fileprivate static func queue(_ connection: OpaquePointer, _ response: HTTPResponse) -> MHD_Result {
        let created = response.body.withUnsafeBytes { raw in
            MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let created else { return .NO }
        defer { MHD_destroy_response(created) }
        for (name, value) in response.headers { _ = MHD_add_response_header(created, name, value) }
        return MHD_queue_response(connection, UInt32(response.status), created)
    }
}

private final class HeaderBox {
    var headers: [String: String] = [:]
    var repeated: Set<String> = []

    func add(_ name: String, _ value: String) {
        let name = name.lowercased()
        if let earlier = headers[name] {
            repeated.insert(name)
            headers[name] = earlier + ", " + value
        } else {
            headers[name] = value
        }
    }
}

/// One request on one connection, from its headers to its response. Retained by MHD's
/// per-request pointer until the request completes, and by the handler's `respond` closure.
private final class Exchange: @unchecked Sendable {
    // @unchecked Sendable: `request` and `phase` before `.handling` are touched only by the daemon
    // thread serving the connection; from then on `phase` and `response` are guarded by `lock`.
    enum Phase { case receiving, discarding, handling, suspended, answered }
    let connection: OpaquePointer
    unowned let server: HTTPServer
    var request: HTTPRequest
    var phase = Phase.receiving
    private var response: HTTPResponse?
    private let lock = NSLock()

    init(connection: OpaquePointer, server: HTTPServer, request: HTTPRequest) {
        self.connection = connection
        self.server = server
        self.request = request
    }

    /// Queues the response if the handler gave it; else suspends the connection until it does.
    func answerOrSuspend() -> MHD_Result {
        lock.lock()
        if let response {
            phase = .answered
            lock.unlock()
            return HTTPServer.queue(connection, response)
        }
        if phase != .suspended {
            phase = .suspended
            MHD_suspend_connection(connection)
        }
        lock.unlock()
        return .YES
    }

    /// The handler's answer (any thread). Resumes the connection if it was suspended.
    func complete(_ response: HTTPResponse) {
        lock.lock()
        defer { lock.unlock() }
        guard self.response == nil else { return }
        self.response = response
        if phase == .suspended { MHD_resume_connection(connection) }
        server.answered()
    }
}

private let accessHandler: MHD_AccessHandlerCallback = { context, connection, url, method, _, upload, uploadSize, state in
    guard let context, let connection, let uploadSize, let state else { return .NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue()
    let path = originForm(url.map { String(cString: $0) } ?? "/")
    return server.handle(connection, url: path, method: method.map { String(cString: $0) } ?? "",
                         upload: upload, uploadSize: uploadSize, state: state)
}

/// The path of a request target: an absolute-form target (`http://host:port/path`, which a
/// server must accept, RFC 9112 section 3.2.2) is reduced to its path, `/` when it has none.
private func originForm(_ target: String) -> String {
    for scheme in ["http://", "https://"] where target.lowercased().hasPrefix(scheme) {
        let authorityAndPath = target.dropFirst(scheme.count)
        guard let slash = authorityAndPath.firstIndex(of: "/") else { return "/" }
        return String(authorityAndPath[slash...])
    }
    return target
}

/// libmicrohttpd's decoding of the `%HH` escapes of a request target, in place, but for `%00`,
/// which stays as it is: decoded, the NUL would end the target's C string there, and
/// `/metrics%00.png` would be `/metrics` to the server but another path to a proxy in front.
private let unescapeTarget: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?) -> Int = { _, _, text in
    guard let text else { return 0 }
    var read = 0, write = 0
    while text[read] != 0 {
        if text[read] == 0x25, let high = hexDigit(text[read + 1]), let low = hexDigit(text[read + 2]), high | low != 0 {
            text[write] = CChar(bitPattern: high << 4 | low)
            read += 3
        } else {
            text[write] = text[read]
            read += 1
        }
        write += 1
    }
    text[write] = 0
    return write
}

private func hexDigit(_ character: CChar) -> UInt8? {
    let byte = UInt8(bitPattern: character)
    switch byte {
    case 0x30...0x39: return byte - 0x30
    case 0x41...0x46: return byte - 0x41 + 10
    case 0x61...0x66: return byte - 0x61 + 10
    default: return nil
    }
}

private let requestCompleted: MHD_RequestCompletedCallback = { context, _, state, _ in
    guard let state, let pointer = state.pointee else { return }
    Unmanaged<Exchange>.fromOpaque(pointer).release()
    state.pointee = nil
    if let context { Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().completed() }
}
