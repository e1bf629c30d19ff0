import CZlib
import Foundation

/// Why a gzip body was refused.
public enum GzipError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The decompressed data would exceed the limit.
    case tooLarge(limit: Int)
    /// The data inflates more than `maxRatio` times its compressed size (a decompression bomb).
    case ratio(maxRatio: Int)
    /// Not a valid gzip stream.
    case corrupt(String)

    public var description: String {
        switch self {
        case let .tooLarge(limit): "the decompressed body is larger than \(limit) bytes"
        case let .ratio(maxRatio): "the body inflates more than \(maxRatio) times its compressed size"
        case let .corrupt(reason): "the gzip body is corrupt: \(reason)"
        }
    }
}

/// gzip decoding through zlib (https://zlib.net/manual.html), bounded: decompression stops as soon
/// as the output passes `limit`, or passes `maxRatio` times the input once it is over 64 KiB.
/// A body of several gzip members decodes to their concatenation.
///
///     let json = try Gzip.decompress(body, limit: 1 << 20, maxRatio: 100)
public enum Gzip {
    public static func decompress(_ input: [UInt8], limit: Int, maxRatio: Int = 100) throws(GzipError) -> [UInt8] {
        let inflater = try Inflater()
        return try inflater.run(input, limit: limit, maxRatio: maxRatio)
    }

    /// gzip encoding at the default level (for clients, tests and benchmarks).
    public static func compress(_ input: [UInt8]) -> [UInt8] {
        var stream = z_stream()
        guard permaudit_deflate_init_gzip(&stream) == Z_OK else { return [] }
        defer { deflateEnd(&stream) }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(input.count))) + 32)
        var input = input
        let produced: Int = input.withUnsafeMutableBufferPointer { source in
            output.withUnsafeMutableBufferPointer { target in
                stream.next_in = source.baseAddress
                stream.avail_in = uInt(source.count)
                stream.next_out = target.baseAddress
                stream.avail_out = uInt(target.count)
                _ = deflate(&stream, Z_FINISH)
                return target.count - Int(stream.avail_out)
            }
        }
        return Array(output.prefix(produced))
    }
}

/// The owner of one zlib inflate stream, ended in `deinit`.
private final class Inflater {
    private let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)

    init() throws(GzipError) {
        stream.initialize(to: z_stream())
        guard permaudit_inflate_init_gzip(stream) == Z_OK else {
            stream.deallocate()
            throw .corrupt("zlib could not start")
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deallocate()
    }

    func run(_ input: [UInt8], limit: Int, maxRatio: Int) throws(GzipError) -> [UInt8] {
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var input = input
        let result: Result<[UInt8], GzipError> = input.withUnsafeMutableBufferPointer { source in
            stream.pointee.next_in = source.baseAddress
            stream.pointee.avail_in = uInt(source.count)
            while true {
                let (status, produced) = chunk.withUnsafeMutableBufferPointer { target in
                    stream.pointee.next_out = target.baseAddress
                    stream.pointee.avail_out = uInt(target.count)
                    let status = inflate(stream, Z_NO_FLUSH)
                    return (status, target.count - Int(stream.pointee.avail_out))
                }
                if output.count + produced > limit { return .failure(.tooLarge(limit: limit)) }
                output.append(contentsOf: chunk[0..<produced])
                if output.count > 64 * 1024, output.count > maxRatio * source.count { return .failure(.ratio(maxRatio: maxRatio)) }
                switch status {
                case Z_STREAM_END:
                    if stream.pointee.avail_in == 0 { return .success(output) }
                    // Another member follows (RFC 1952 section 2.2: a gzip file is a series of
                    // members, e.g. written by appending); anything else fails its header check.
                    inflateReset(stream)
                case Z_OK:
                    continue
                case Z_BUF_ERROR:
                    // No progress possible: the input ended before the stream did.
                    if produced == 0 { return .failure(.corrupt("truncated")) }
                default:
                    return .failure(.corrupt(stream.pointee.msg.map { String(cString: $0) } ?? "inflate error \(status)"))
                }
            }
        }
        return try result.get()
    }
}
