import Foundation
import PermissionEvents
import Reports

/// A subcommand: a static description for help, and a `run` over parsed arguments.
protocol Command {
    static var name: String { get }
    static var abstract: String { get }
    /// Usage line(s) after `permaudit`.
    static var usage: String { get }
    static var discussion: String { get }
    /// Options: (spelling, help). Every command also takes -h/--help.
    static var options: [(String, String)] { get }
    /// Names of options that take a value.
    static var valueOptions: Set<String> { get }
    static func run(_ arguments: ParsedArguments) throws -> Int32
}

extension Command {
    static var discussion: String { "" }

    /// Options without a value: every spelling in `options` (e.g. "--once", "-h, --help") that is
    /// not a value option, so that the help text and the parser cannot disagree.
    static var flagOptions: Set<String> {
        Set(options.flatMap { spelling, _ in
            spelling.split(separator: ",").compactMap { $0.split(separator: " ").first.map(String.init) }
        }).subtracting(valueOptions)
    }

    static var help: String {
        var text = "OVERVIEW: \(abstract)\n"
        if !discussion.isEmpty { text += "\n\(discussion)\n" }
        text += "\nUSAGE: \(usage)\n"
        let all = options + [("-h, --help", "Show help information.")]
        text += "\nOPTIONS:\n"
        for (spelling, help) in all {
            text += "  " + spelling.padding(toLength: max(spelling.count, 26), withPad: " ", startingAt: 0) + help + "\n"
        }
        return text
    }
}

/// A usage error: exit 64 with the command's usage line.
struct UsageError: Error {
    var message: String
    var usage: String
}

/// Failures the CLI reports as `Error: ...` with exit 1.
struct CommandFailure: Error {
    var message: String
    var exitCode: Int32 = 1
}

/// Options and positional arguments after the subcommand name.
struct ParsedArguments {
    var values: [String: String] = [:]
    var flags: Set<String> = []
    var positionals: [String] = []
    let usage: String

    init(_ arguments: [String], valueOptions: Set<String>, flagOptions: Set<String>, usage: String) throws {
        self.usage = usage
        var index = 0
        var onlyPositionals = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositionals || argument == "-" || !argument.hasPrefix("-") {
                positionals.append(argument)
                continue
            }
            if argument == "--" { onlyPositionals = true; continue }
            var name = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            if valueOptions.contains(name) {
                guard values[name] == nil else { throw UsageError(message: "'\(name)' given more than once", usage: usage) }
                if let inline { values[name] = inline; continue }
                guard index < arguments.count else { throw UsageError(message: "missing value for '\(name)'", usage: usage) }
                values[name] = arguments[index]
                index += 1
            } else if flagOptions.contains(name), inline == nil {
                flags.insert(name)
            } else {
                throw UsageError(message: "unknown option '\(name)'", usage: usage)
            }
        }
    }

    func value(_ name: String) -> String? { values[name] }
    /// Every option given, value options and flags, sorted.
    var given: [String] { (Array(values.keys) + flags).sorted() }
    func has(_ flag: String) -> Bool { flags.contains(flag) }

    func int(_ name: String, default fallback: Int, range: ClosedRange<Int> = 1...Int.max) throws -> Int {
        guard let text = values[name] else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw UsageError(message: "'\(name)' must be an integer in \(range.lowerBound)...\(range.upperBound), got '\(text)'", usage: usage)
        }
        return value
    }

    /// A `YYYY-MM-DD` option, checked (returned as given).
    func day(_ name: String) throws -> String? {
        guard let text = values[name] else { return nil }
        guard text.utf8.count == 10, RFC3339.parse(text + "T00:00:00Z") != nil else {
            throw UsageError(message: "'\(name)' must be a date YYYY-MM-DD, got '\(text)'", usage: usage)
        }
        return text
    }

    /// --from and --to: inclusive days, the first not after the second.
    func dayRange() throws -> (from: String?, to: String?) {
        let range = (from: try day("--from"), to: try day("--to"))
        if let from = range.from, let to = range.to, from > to {  // YYYY-MM-DD compares as text
            throw UsageError(message: "'--from' (\(from)) is after '--to' (\(to))", usage: usage)
        }
        return range
    }

    /// The --app option: an app id (1-255 characters [A-Za-z0-9._-]) or absent.
    func app() throws -> String? {
        guard let text = values["--app"] else { return nil }
        guard EventValidator.isApp(text) else {
            throw UsageError(message: "'--app' must be an app id: 1-255 characters [A-Za-z0-9._-]", usage: usage)
        }
        return text
    }

    /// The --platform option: ios, android or absent.
    func platform() throws -> String? {
        guard let text = values["--platform"] else { return nil }
        guard text == "ios" || text == "android" else {
            throw UsageError(message: "'--platform' must be ios or android, got '\(text)'", usage: usage)
        }
        return text
    }

    /// Refuses an option given that `mode` does not take (--database-url goes with every mode
    /// that opens the database: list it in `options` for those).
    func refuse(allBut options: Set<String>, for mode: String) throws {
        if let option = given.first(where: { !options.contains($0) }) {
            throw UsageError(message: "'\(option)' does not apply to \(mode)", usage: usage)
        }
    }

    func noPositionals() throws {
        if let first = positionals.first { throw UsageError(message: "unexpected argument '\(first)'", usage: usage) }
    }

    /// The one positional argument, an action among `actions`.
    func action(_ actions: [String]) throws -> String {
        let expected = "expected one of " + actions.joined(separator: ", ")
        guard let first = positionals.first else { throw UsageError(message: expected, usage: usage) }
        guard actions.contains(first) else { throw UsageError(message: "unknown action '\(first)'; \(expected)", usage: usage) }
        if positionals.count > 1 { throw UsageError(message: "unexpected argument '\(positionals[1])'", usage: usage) }
        return first
    }
}

/// An error's text for the terminal. Foundation's file errors describe themselves as a dump of
/// their domain, code and user info: they are shown as the path and the system's reason.
func describe(_ error: any Error) -> String {
    guard let error = error as? CocoaError else { return "\(error)" }
    return "\(error.filePath ?? error.url?.path ?? "a file"): \(ReportWriter.OutputError.reason(error))"
}

/// Writes to standard error without buffering surprises.
func printError(_ text: String) {
    writeToStandardError(text + "\n")
}

/// Standard error, where a failed write (a full disk) is not worth a crash. (A pipe whose reader
/// has gone still ends the process with SIGPIPE, as for standard output: `permaudit events | head`.)
func writeToStandardError(_ text: String) {
    try? FileHandle.standardError.write(contentsOf: Data(text.utf8))
}

/// Buffered standard output for commands that print many lines.
final class OutputBuffer {
    private var buffer: [UInt8] = []
    init() { buffer.reserveCapacity(1 << 16) }
    func write(_ text: String) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= 1 << 16 { flush() }
    }
    func flush() {
        guard !buffer.isEmpty else { return }
        buffer.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Foundation.write(1, raw.baseAddress! + offset, raw.count - offset)
                if n <= 0 { break }
                offset += n
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }
    deinit { flush() }
}

/// "1 batch", "2 batches".
func counted(_ count: Int, _ singular: String, _ plural: String) -> String {
    "\(count) " + (count == 1 ? singular : plural)
}

let databaseOption = ("--database-url <url>", "PostgreSQL URL (default: $DATABASE_URL, else the embedded cluster in $PERMAUDIT_HOME).")

/// The bytes the shell passed for the argument that `CommandLine.arguments` shows as `text`.
/// `CommandLine.arguments` replaces bytes that are not UTF-8 with U+FFFD; an event must be
/// refused for them, not stored with the replacement characters.
func rawArgument(_ text: String) -> [UInt8] {
    for index in 1..<Int(CommandLine.argc) {
        guard let pointer = CommandLine.unsafeArgv[index] else { continue }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: strlen(pointer))
        if String(decoding: bytes, as: UTF8.self).utf8.elementsEqual(text.utf8) { return Array(bytes) }
    }
    return Array(text.utf8)
}
