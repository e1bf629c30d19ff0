import Foundation

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
        descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CommandFailure(message: "\(path): cannot create the rejects file (\(String(cString: strerror(errno))))")
        }
        var status = stat()
        let statted = fstat(descriptor, &status) == 0
        isRegular = statted && status.st_mode & S_IFMT == S_IFREG
        guard statted, !isRegular || (fchmod(descriptor, 0o600) == 0 && ftruncate(descriptor, 0) == 0) else {
            // Every property is set: deinit closes the descriptor.
            throw CommandFailure(message: "\(path): cannot create the rejects file (\(String(cString: strerror(errno))))")
        }
    }

    deinit { close(descriptor) }

    /// Writes one line (with its newline). When the write fails (a full disk), a regular file is
    /// cut back to its last whole line and the error names the file and the reason.
    func write(_ line: String) throws {
        var line = line
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
