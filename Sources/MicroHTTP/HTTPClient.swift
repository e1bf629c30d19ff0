import Foundation

/// A minimal blocking HTTP/1.1 client over one TCP connection (keep-alive), for benchmarks and
/// end-to-end tests on loopback: it sends requests with a `Content-Length` body and reads
/// `Content-Length` responses. The owner of its socket, closed in `deinit`.
///
///     let client = try HTTPClient(host: "127.0.0.1", port: 8080)
///     let response = try client.send("GET", "/healthz")
public final class HTTPClient {
    public struct Response: Sendable {
        public var status: Int
        /// Header names in lower case.
        public var headers: [String: String]
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public let host: String
    public let port: UInt16
    public let timeout: Double
    private var socket: Int32 = -1
    private var buffer: [UInt8] = []

    public init(host: String = "127.0.0.1", port: UInt16, timeout: Double = 30) throws {
        self.host = host
        self.port = port
        self.timeout = timeout
        try connect()
    }

    deinit { disconnect() }

    /// Sends a request and reads its response; reconnects once if the server had closed an idle
    /// connection before the request was sent. A server that answers before it has read the whole
    /// body (a 413) and closes makes the rest of the send fail: its answer is read and returned.
    public func send(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = []) throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        let request = Array(head.utf8) + body
        if socket < 0 { try connect() }
        do {
            do {
                try write(request)
            } catch let error as HTTPClientError where error.connectionClosed {
                if let answer = try? readResponse() { return answer }
                throw error
            }
            return try readResponse()
        } catch let error as HTTPClientError where error.connectionClosed && buffer.isEmpty {
            disconnect()
            try connect()
            try write(request)
            return try readResponse()
        }
    }

    /// Writes raw bytes (for tests of partial or malformed requests).
    public func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Foundation.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw HTTPClientError(description: "send failed: \(String(cString: strerror(errno)))", connectionClosed: errno == EPIPE || errno == ECONNRESET)
            }
            offset += n
        }
    }

    /// Reads one response (status line, headers, `Content-Length` body).
    public func readResponse() throws -> Response {
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = Self.find([13, 10, 13, 10], in: buffer)
            if headerEnd == nil { try fill() }
        }
        let head = String(decoding: buffer[0..<headerEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw HTTPClientError(description: "malformed status line", connectionClosed: false)
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = headers["content-length"].flatMap(Int.init) ?? 0
        let start = headerEnd! + 4
        while buffer.count < start + length { try fill() }
        let body = Array(buffer[start..<(start + length)])
        buffer.removeFirst(start + length)
        if headers["connection"]?.lowercased() == "close" { disconnect() }
        return Response(status: status, headers: headers, body: body)
    }

    /// True when the server has closed the connection (reads end of stream within `timeout`).
    public func waitForClose(timeout: Double) -> Bool {
        setReceiveTimeout(timeout)
        defer { setReceiveTimeout(self.timeout) }
        var byte: UInt8 = 0
        while true {
            let n = recv(socket, &byte, 1, 0)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let n = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
        if n == 0 { throw HTTPClientError(description: "the server closed the connection", connectionClosed: true) }
        if n < 0 {
            if errno == EINTR { return }
            throw HTTPClientError(description: "receive failed: \(String(cString: strerror(errno)))", connectionClosed: errno == ECONNRESET)
        }
        buffer.append(contentsOf: chunk[0..<n])
    }

    private func connect() throws {
        buffer = []
        socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw HTTPClientError(description: "socket failed", connectionClosed: false) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let reason = String(cString: strerror(errno))
            disconnect()
            throw HTTPClientError(description: "cannot connect to \(host):\(port): \(reason)", connectionClosed: false)
        }
        var one: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        setReceiveTimeout(timeout)
    }

    private func setReceiveTimeout(_ seconds: Double) {
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    private func disconnect() {
        if socket >= 0 { close(socket) }
        socket = -1
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] && Array(haystack[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }
}

public struct HTTPClientError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public var connectionClosed: Bool
    public init(description: String, connectionClosed: Bool) {
        self.description = description
        self.connectionClosed = connectionClosed
    }
}
