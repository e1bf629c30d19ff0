import EventLog
import Foundation
import PermissionEvents

/// The file of `ingest --rejects`: one JSON line per rejected input line, written whole or not
/// at all. Owns its descriptor.
final class RejectsFile {
    let path: String
    private let descriptor: Int32
    private let isRegular: Bool
    /// The bytes of the whole lines written so far.
    private var length: off_t = 0

    /// Opens `path` for writing. A regular file is made owner-only before an existing one is
    /// emptied: the raw lines hold subject ids, which erasure cannot reach in this file. Anything
    /// else (a pipe, /dev/null, a terminal) is written as it is: its mode is not ours to change.
    init(path: String) throws {
        self.path = path
        let cannotCreate = { CommandFailure(message: "\(path): cannot create the rejects file (\(String(cString: strerror(errno))))") }
        descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw cannotCreate() }
        var status = stat()
        let statted = fstat(descriptor, &status) == 0
        isRegular = statted && status.st_mode & S_IFMT == S_IFREG
        // Every property is set from here on: deinit closes the descriptor.
        guard statted, !isRegular || (fchmod(descriptor, 0o600) == 0 && ftruncate(descriptor, 0) == 0) else { throw cannotCreate() }
    }

    deinit { close(descriptor) }

    /// Writes the rejection's line: {"input", "line", "reason", "raw"}, and "rawBase64" for a
    /// line that is not UTF-8 (JSON text holds no invalid UTF-8: "raw" shows such bytes as
    /// U+FFFD, "rawBase64" keeps them). When the write fails (a full disk), a regular file is cut
    /// back to its last whole line and the error names the file and the reason.
    func write(_ rejection: Ingestor.Rejection) throws {
        var line = "{\"input\":"
        JSONValue.writeQuoted(rejection.input, to: &line)
        line += ",\"line\":\(rejection.line),\"reason\":"
        JSONValue.writeQuoted(rejection.reason, to: &line)
        line += ",\"raw\":"
        JSONValue.writeQuoted(String(decoding: rejection.raw, as: UTF8.self), to: &line)
        if String(validating: rejection.raw, as: UTF8.self) == nil {
            line += ",\"rawBase64\":\"\(Data(rejection.raw).base64EncodedString())\""
        }
        line += "}\n"
        try line.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Foundation.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    let reason = String(cString: strerror(errno))
                    if isRegular { _ = ftruncate(descriptor, length) }
                    throw CommandFailure(message: "\(path): cannot write the rejects file (\(reason)); it holds the lines rejected before, each whole")
                }
                offset += written
            }
        }
        length += off_t(line.utf8.count)
    }
}
