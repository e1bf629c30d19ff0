import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// The `permaudit` executable, run as a user runs it.
final class CLITests: DatabaseTestCase {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static var binary: URL { TestDatabase.permauditBinary }

    static func run(_ arguments: [String], url: String, stdin: String? = nil, stdinBytes: [UInt8]? = nil,
                    environment: [String: String] = [:], executable: URL = binary) throws -> Run {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = url
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.currentDirectoryURL = TestDatabase.packageRoot
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let bytes = stdinBytes ?? stdin.map({ Array($0.utf8) }) { input.fileHandleForWriting.write(Data(bytes)) }
        try input.fileHandleForWriting.close()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    func permaudit(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> Run {
        try Self.run(arguments, url: url, stdin: stdin, environment: environment)
    }

    func permaudit(_ arguments: [String], stdinBytes: [UInt8]) throws -> Run {
        try Self.run(arguments, url: url, stdinBytes: stdinBytes)
    }

    func testVersionAndHelp() throws {
        let version = try permaudit(["--version"])
        XCTAssertEqual(version.status, 0)
        XCTAssertTrue(version.stdout.first?.isNumber ?? false)
        let help = try permaudit(["--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdout.hasPrefix("OVERVIEW: "))
        for command in ["db", "migrate", "append", "ingest", "events"] {
            XCTAssertTrue(help.stdout.contains("\n  \(command) "), command)
            let sub = try permaudit(["help", command])
            XCTAssertEqual(sub.status, 0, command)
            XCTAssertTrue(sub.stdout.contains("USAGE: permaudit \(command)"), command)
            XCTAssertEqual(try permaudit([command, "--help"]).stdout, sub.stdout, command)
        }
        let ingestHelp = try permaudit(["help", "ingest"]).stdout
        XCTAssertTrue(ingestHelp.contains("  --rejects <file>"))
        XCTAssertTrue(ingestHelp.contains("  -h, --help"))
    }

    func testKeysCreateListRevoke() throws {
        let created = try permaudit(["keys", "create", "--app", "com.example.snap"])
        XCTAssertEqual(created.status, 0, created.stderr)
        let key = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(key.hasPrefix("pak_") && key.count == 68, key)
        let stored: Int = try Connection(url: url).query("select count(*)::int from collector.api_keys where key_hash = sha256(convert_to($1, 'UTF8'))", [key]).scalar()
        XCTAssertEqual(stored, 1, "only the hash is stored")
        let listed = try permaudit(["keys", "list"])
        XCTAssertEqual(listed.status, 0)
        XCTAssertTrue(listed.stdout.contains("\tcom.example.snap\t"), listed.stdout)
        XCTAssertFalse(listed.stdout.contains(key), "a list never shows a key")
        let id = listed.stdout.split(separator: "\n")[1].split(separator: "\t")[0]
        XCTAssertEqual(try permaudit(["keys", "revoke", String(id)]).stdout, "revoked key \(id)\n")
        XCTAssertEqual(try permaudit(["keys", "revoke", String(id)]).status, 1, "already revoked")
        XCTAssertEqual(try permaudit(["keys", "create"]).status, 64)
        XCTAssertEqual(try permaudit(["keys", "create", "--app", "bad app"]).status, 64)
        XCTAssertEqual(try permaudit(["serve", "--listen", "nowhere"]).status, 64)
    }

    func testHelpSnapshots() throws {
        // Snapshots live in Tests/CLITests/Snapshots; update them when a help text changes on purpose.
        for (arguments, file) in [(["--help"], "help.txt"), (["help", "ingest"], "help-ingest.txt"), (["help", "project"], "help-project.txt"), (["help", "serve"], "help-serve.txt")] {
            let expected = try String(contentsOf: TestDatabase.packageRoot.appendingPathComponent("Tests/CLITests/Snapshots/\(file)"), encoding: .utf8)
            XCTAssertEqual(try permaudit(arguments).stdout, expected, file)
        }
    }

    /// A home the PostgreSQL tools cannot take is refused by every action of `db`, not only by
    /// start: `db url` printed a URL that libpq reads as a list of two hosts.
    func testEveryDbActionRefusesAHomeWithAComma() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("pa,\(UUID().uuidString.prefix(8))")
        for action in ["start", "stop", "status", "url"] {
            let run = try Self.run(["db", action], url: "", environment: ["PERMAUDIT_HOME": home.path])
            XCTAssertEqual(run.status, 1, action)
            XCTAssertEqual(run.stdout, "", action)
            XCTAssertTrue(run.stderr.contains("contains a comma, a double quote"), "\(action): \(run.stderr)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path))
    }

    func testUsageErrorsExit64() throws {
        for (arguments, message) in [
            (["frobnicate"], "unknown subcommand 'frobnicate'"), (["ingest", "--nope"], "unknown option '--nope'"),
            (["events", "--limit"], "missing value for '--limit'"), (["events", "--limit", "x"], "'--limit' must be an integer"),
            (["db", "explode"], "unknown action 'explode'"), (["db", "status", "extra"], "unexpected argument 'extra'"),
            (["stats", "denial", "priming"], "unexpected argument 'priming'"),
            (["stats", "denial", "--by", "day", "--by", "app"], "'--by' given more than once"),
            (["stats", "denial", "--by", "day,day"], "'day' appears twice in --by"), (["stats", "denial", "--by", "day,"], "unknown dimension ''"),
            (["project", "--once", "--seal-every", "5"], "'--seal-every' does not apply to --once"),
            (["project", "--status", "--wait"], "'--wait' does not apply to --status"),
            (["simulate", "--start", "2999-01-01", "--out", "/dev/null"], "'--start' 2999-01-01 with --days 28 ends after today"),
            // An option that the chosen action or mode does not take is refused, not ignored.
            (["simulate", "--rate", "5", "--out", "/dev/null"], "'--rate' does not apply to a simulated period (without --live)"),
            (["simulate", "--live", "--days", "3"], "'--days' does not apply to --live"),
            (["audit", "seal", "--from", "3"], "'--from' does not apply to audit seal"),
            (["audit", "keygen", "--app", "x"], "'--app' does not apply to audit keygen"),
            (["keys", "list", "--app", "x"], "'--app' does not apply to keys list"),
            (["keys", "revoke", "abc"], "'keys revoke': the key id must be a positive integer"),
            // The usage error comes before the files are looked at.
            (["ingest", "--batch-size", "0", "/nonexistent.ndjson"], "'--batch-size' must be an integer in 1...10000"),
            (["audit", "nosuch"], "unknown audit action 'nosuch'"),
            (["audit", "prove"], "'audit prove' takes one EVENT_ID, got 0 arguments"),
            (["audit", "check-proof", "a", "b"], "'audit check-proof' takes one proof FILE, got 2 arguments"),
            // An install id given in place of --subject is not echoed.
            (["audit", "erase", "cli-secret-SECRETPW", "--app", "com.example.app", "--reason", "r"],
             "'audit erase' takes no arguments (the install is --subject), got 1 argument"),
            (["serve", "--listen", "[::1]:8080"], "'--listen' must name an IPv4 address"),
            (["--bogus"], "unknown option '--bogus'"), (["--version", "extra"], "unexpected argument 'extra'"),
            (["help", "nosuch"], "unknown subcommand 'nosuch'"),
            (["events", "--database-url", ""], "'--database-url' is empty"),
            // libpq quotes a malformed URL whole, password included: the message leaves it out.
            (["events", "--database-url", "postgresql://bob:SECRETPW@[bad/db"], "'--database-url': invalid database URL: "),
        ] {
            let run = try permaudit(arguments)
            XCTAssertEqual(run.status, 64, "\(arguments)")
            XCTAssertTrue(run.stderr.hasPrefix("Error: \(message)"), run.stderr)
            XCTAssertTrue(run.stderr.contains("Usage: "), run.stderr)
            XCTAssertEqual(run.stdout, "")
            XCTAssertFalse(run.stderr.contains("SECRETPW"), run.stderr)
        }
        XCTAssertEqual(try permaudit(["help", "help"]).stdout, try permaudit(["--help"]).stdout)
    }

    func testAppendIngestAndEvents() throws {
        let event = EventFixtures.event(subject: "cli-subject")
        let appended = try permaudit(["append"], stdin: event)
        XCTAssertEqual(appended.status, 0, appended.stderr)
        XCTAssertTrue(appended.stdout.hasPrefix("appended "), appended.stdout)
        XCTAssertTrue(try permaudit(["append", event]).stdout.hasPrefix("duplicate "))
        XCTAssertTrue(try permaudit(["append", "-"], stdin: event).stdout.hasPrefix("duplicate "))
        XCTAssertTrue(try permaudit(["append"], stdinBytes: [0xEF, 0xBB, 0xBF] + Array(event.utf8)).stdout.hasPrefix("duplicate "), "a byte order mark is skipped")
        let conflict = try permaudit(["append", event.replacingOccurrences(of: "\"cli-subject\"", with: "\"other-subject\"")])
        XCTAssertEqual(conflict.stderr, "Error: eventId: an event with this id was already stored with different content\n")

        let bad = try permaudit(["append", EventFixtures.event(overrides: ["platform": "\"windows\""])])
        XCTAssertEqual(bad.status, 1)
        XCTAssertEqual(bad.stderr, "Error: platform: must be \"ios\" or \"android\"\n")

        let lines = (0..<20).map { _ in EventFixtures.event(subject: "s") } + [event]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cli-\(UUID()).ndjson")
        defer { try? FileManager.default.removeItem(at: file) }
        try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        let ingest = try permaudit(["ingest", file.path])
        XCTAssertEqual(ingest.status, 0, ingest.stderr)
        XCTAssertEqual(ingest.stdout, "appended 20, duplicates 1, rejected 0\n")
        let again = try permaudit(["ingest"], stdin: lines.joined(separator: "\n"))
        XCTAssertEqual(again.stdout, "appended 0, duplicates 21, rejected 0\n")

        let events = try permaudit(["events", "--limit", "3"])
        XCTAssertEqual(events.status, 0)
        let printed = events.stdout.split(separator: "\n")
        XCTAssertEqual(printed.count, 3)
        XCTAssertTrue(printed[0].hasPrefix("{\"position\":"))
        XCTAssertFalse(events.stdout.contains("cli-subject"), "the log never holds the subject")
    }

    func testAppendRefusesInvalidUTF8FromStdinAndArgument() throws {
        let id = UUID()
        let bytes = Array(EventFixtures.event(id: id, subject: "S~~X").utf8).split(separator: UInt8(ascii: "~"), omittingEmptySubsequences: false)
            .map(Array.init).joined(separator: [0xFF]).map { $0 }
        let expected = "Error: event: malformed JSON: invalid UTF-8 at byte "
        let piped = try permaudit(["append"], stdinBytes: bytes)
        XCTAssertEqual(piped.status, 1, piped.stdout)
        XCTAssertTrue(piped.stderr.hasPrefix(expected), piped.stderr)
        // As the argument, through a shell: Process passes its arguments as Strings.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cli-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(bytes).write(to: file)
        let argument = try Self.run(["-c", "exec \"$0\" append \"$(cat \"$1\")\"", Self.binary.path, file.path], url: url,
                                    executable: URL(fileURLWithPath: "/bin/sh"))
        XCTAssertEqual(argument.status, 1, argument.stdout)
        XCTAssertTrue(argument.stderr.hasPrefix(expected), argument.stderr)
        let events = try permaudit(["events"])
        XCTAssertEqual(events.status, 0, events.stderr)
        XCTAssertFalse(events.stdout.contains(id.uuidString.lowercased()), "nothing stored")
    }

    /// A rejects file that cannot take the next line (a full disk; here a file size limit and
    /// /dev/full) ends the ingest with the file and the reason named, and the file keeps whole
    /// lines only: the write trapped, and left half a JSON line.
    func testARejectsFileThatCannotBeWrittenIsAnErrorAndKeepsWholeLines() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cli-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("in.ndjson")
        // 150 valid lines (a batch of 100 sent, 50 waiting), then 20 invalid ones.
        let lines = (0..<150).map { _ in EventFixtures.event(subject: "install-\(UUID())") }
            + (0..<20).map { _ in EventFixtures.event(overrides: ["type": "\"permission.maybe\""]) }
        try (lines.joined(separator: "\n") + "\n").write(to: input, atomically: true, encoding: .utf8)
        let rejects = directory.appendingPathComponent("rejects.ndjson")
        // The size limit's signal ignored, as a full disk gives no signal: the writes fail (EFBIG).
        let limited = try Self.run(["-c", #"trap "" XFSZ; ulimit -f 2; exec "$0" ingest "$1" --rejects "$2" --batch-size 100"#,
                                    Self.binary.path, input.path, rejects.path], url: url, executable: URL(fileURLWithPath: "/bin/sh"))
        XCTAssertEqual(limited.status, 1, limited.stderr)
        XCTAssertTrue(limited.stderr.contains("\(rejects.path): cannot write the rejects file (File too large)"), limited.stderr)
        let kept = try String(contentsOf: rejects, encoding: .utf8)
        XCTAssertTrue(kept.hasSuffix("}\n"), kept)
        let keptLines = kept.split(separator: "\n")
        XCTAssertGreaterThan(keptLines.count, 0)
        XCTAssertLessThan(keptLines.count, 20)
        for line in keptLines { XCTAssertNoThrow(try JSONSerialization.jsonObject(with: Data(line.utf8))) }
        // What the summary says is what the log and the file hold.
        let stored = try Connection(url: url).query("select count(*)::int from audit.events").scalar(Int.self)
        XCTAssertEqual(stored, 100)
        XCTAssertTrue(limited.stderr.contains("before the error: appended \(stored), duplicates 0 (stored); rejected \(keptLines.count) (written to"),
                      limited.stderr)

        let full = try permaudit(["ingest", input.path, "--rejects", "/dev/full"])
        XCTAssertEqual(full.status, 1, full.stderr)
        XCTAssertTrue(full.stderr.contains("/dev/full: cannot write the rejects file (No space left on device)"), full.stderr)
    }

    /// SIGINT or SIGTERM during an ingest ends it at the next batch and says what was stored:
    /// with --rejects the batches committed so far (as many as the log holds), all or nothing
    /// none. It exited 130 or 143 without a word.
    func testAnInterruptedIngestSaysWhatItStored() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cli-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("in.ndjson")
        XCTAssertEqual(try permaudit(["simulate", "--subjects", "10000", "--days", "30", "--out", input.path]).status, 0)
        let stored = "select count(*)::int from audit.events"
        for (arguments, signal) in [(["--rejects", directory.appendingPathComponent("rejects.ndjson").path], SIGINT), ([], SIGTERM)] {
            let url = try TestDatabase.create()
            defer { TestDatabase.drop(url) }
            let db = try Connection(url: url)
            let process = Process()
            let stderr = Pipe()
            process.executableURL = CLITests.binary
            process.arguments = ["ingest", input.path, "--batch-size", "200"] + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(["DATABASE_URL": url]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = stderr
            try process.run()
            if arguments.isEmpty {
                Thread.sleep(forTimeInterval: 1)  // reading and validating; the copy not committed
            } else {
                let deadline = Date().addingTimeInterval(60)
                while try db.query(stored).scalar(Int.self) == 0 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
            }
            kill(process.processIdentifier, signal)
            let text = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 128 + signal, text)
            let count = try db.query(stored).scalar(Int.self)
            if arguments.isEmpty {
                XCTAssertTrue(text.contains("interrupted: nothing from the input was stored (all or nothing)"), text)
                XCTAssertEqual(count, 0)
            } else {
                XCTAssertTrue(text.contains("stopping at the next batch"), text)
                XCTAssertTrue(text.contains("interrupted: appended \(count), duplicates "), text)  // the simulation re-sends some
                XCTAssertGreaterThan(count, 0)
            }
        }
    }

    /// A standard descriptor the caller closed is not taken by the database connection: ingest
    /// read its input from the connection (EAGAIN), and its errors went into it.
    func testClosedStandardDescriptorsStayAwayFromTheConnection() throws {
        let run = try Self.run(["-c", #"exec "$0" ingest <&-"#, Self.binary.path], url: url, executable: URL(fileURLWithPath: "/bin/sh"))
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(run.stdout, "appended 0, duplicates 0, rejected 0\n")
        let invalid = FileManager.default.temporaryDirectory.appendingPathComponent("cli-\(UUID()).ndjson")
        try "{\"eventId\": 12\n".write(to: invalid, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: invalid) }
        let noStderr = try Self.run(["-c", #"exec "$0" ingest "$1" 2>&-"#, Self.binary.path, invalid.path], url: url,
                                    executable: URL(fileURLWithPath: "/bin/sh"))
        XCTAssertEqual(noStderr.status, 1, "the one invalid line, reported nowhere, and not a broken connection")
        XCTAssertEqual(noStderr.stdout, "appended 0, duplicates 0, rejected 1\n")
    }

    func testIngestExitCodesAndRejectsFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cli-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var lines = (0..<10).map { _ in EventFixtures.event() }
        lines[2] = "{\"eventId\": 12"
        lines[7] = EventFixtures.event(subject: "secret-subject", overrides: ["type": "\"permission.maybe\""])
        let input = directory.appendingPathComponent("in.ndjson")
        try (lines.joined(separator: "\n") + "\n").write(to: input, atomically: true, encoding: .utf8)

        let strict = try permaudit(["ingest", input.path])
        XCTAssertEqual(strict.status, 1)
        XCTAssertEqual(strict.stdout, "appended 0, duplicates 0, rejected 2\n")
        XCTAssertTrue(strict.stderr.contains("3: event: malformed JSON"), strict.stderr)
        XCTAssertTrue(strict.stderr.contains("8: type: must be one of the event catalogue types"), strict.stderr)
        XCTAssertFalse(strict.stderr.contains("secret-subject"), "errors never print payloads")

        let rejects = directory.appendingPathComponent("rejects.ndjson")
        let lenient = try permaudit(["ingest", input.path, "--rejects", rejects.path])
        XCTAssertEqual(lenient.status, 3)
        XCTAssertEqual(lenient.stdout, "appended 8, duplicates 0, rejected 2\n")
        let rejected = try String(contentsOf: rejects, encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(rejected.count, 2)
        XCTAssertTrue(rejected[0].hasPrefix("{\"input\":"))
        XCTAssertTrue(rejected[0].contains("\"line\":3"))
        XCTAssertTrue(rejected[1].contains("\"raw\":"))
        XCTAssertFalse(rejected[1].contains("\"rawBase64\":"), "a UTF-8 line is given once")

        // A line that is not UTF-8 keeps its exact bytes in "rawBase64" ("raw" cannot hold them).
        let notUTF8: [UInt8] = Array("{\"eventId\": \"".utf8) + [0xC3, 0x28] + Array("\"}\n".utf8)
        let binary = directory.appendingPathComponent("binary.ndjson")
        try Data(notUTF8).write(to: binary)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: rejects.path)
        XCTAssertEqual(try permaudit(["ingest", binary.path, "--rejects", rejects.path]).status, 3)
        // An existing rejects file is owner-only afterwards too: its lines hold install ids.
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: rejects.path)[.posixPermissions] as? Int, 0o600)
        let record = try JSONSerialization.jsonObject(with: Data(contentsOf: rejects)) as? [String: Any]
        XCTAssertEqual((record?["rawBase64"] as? String).flatMap { Data(base64Encoded: $0) }, Data(notUTF8.dropLast()))
        // Not a regular file (a pipe here; /dev/null alike): written to, its mode left alone.
        let pipe = directory.appendingPathComponent("rejects.fifo")
        XCTAssertEqual(mkfifo(pipe.path, 0o644), 0)
        let received = Concurrently.inBackground { FileHandle(forReadingAtPath: pipe.path)?.readDataToEndOfFile() }
        XCTAssertEqual(try permaudit(["ingest", input.path, "--rejects", pipe.path]).status, 3)
        XCTAssertEqual(try received().get().map { String(decoding: $0, as: UTF8.self).split(separator: "\n").count }, 2)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: pipe.path)[.posixPermissions] as? Int, 0o644)

        for (path, message) in [("-", "'--rejects' needs a file"), (directory.path, "cannot create the rejects file (Is a directory)")] {
            let run = try permaudit(["ingest", input.path, "--rejects", path])
            XCTAssertTrue(run.stderr.contains(message), run.stderr)
        }

        let missing = try permaudit(["ingest", directory.appendingPathComponent("nope").path])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderr.contains("nope: no such file"), missing.stderr)
        let folder = try permaudit(["ingest", "--rejects", rejects.path, input.path, directory.path])
        XCTAssertEqual(folder.status, 1)
        XCTAssertEqual(folder.stderr, "Error: \(directory.path): is a directory\n", "refused before anything is read")

        // The rejects file must not be an input: it is emptied before the inputs are read.
        let before = try Data(contentsOf: input)
        for (arguments, stdin) in [(["ingest", "--rejects", input.path, input.path], nil), (["ingest", "--rejects", input.path, "-"], input.path)] {
            let run: Run
            if let stdin {  // `- < FILE`: standard input is the file
                run = try Self.run(["-c", "f=$1; shift; exec \"$0\" \"$@\" < \"$f\"", Self.binary.path, stdin] + arguments, url: url,
                                   executable: URL(fileURLWithPath: "/bin/sh"))
            } else {
                run = try permaudit(arguments)
            }
            XCTAssertEqual(run.status, 64, run.stderr)
            XCTAssertTrue(run.stderr.contains("'--rejects' names an input"), run.stderr)
            XCTAssertEqual(try Data(contentsOf: input), before)
        }

        // CRLF line ends and a byte order mark: the lines as they are meant, and the raw line
        // in the rejects file without its CR.
        let windows = directory.appendingPathComponent("windows.ndjson")
        try Data([0xEF, 0xBB, 0xBF] + Array((EventFixtures.event() + "\r\n{\"eventId\": 12}\r\n").utf8)).write(to: windows)
        let crlf = try permaudit(["ingest", windows.path, "--rejects", rejects.path])
        XCTAssertEqual(crlf.stdout, "appended 1, duplicates 0, rejected 1\n", crlf.stderr)
        let rejectedLine = try String(contentsOf: rejects, encoding: .utf8)
        XCTAssertTrue(rejectedLine.contains("\"line\":2,") && rejectedLine.hasSuffix(",\"raw\":\"{\\\"eventId\\\": 12}\"}\n"), rejectedLine)

        // An error that is not a line's (here PA004: the log is ahead of the transaction counter)
        // ends the run; what was done before it is said, the rejected lines being in the file.
        try TestDatabase.addAnEventAheadOfTheTransactionCounter(try Connection(url: url))
        let stopped = try permaudit(["ingest", input.path, "--rejects", rejects.path])
        XCTAssertEqual(stopped.status, 1)
        XCTAssertTrue(stopped.stderr.contains("before the error: appended 0, duplicates 0 (stored); rejected 2 (written to \(rejects.path))"),
                      stopped.stderr)
        XCTAssertTrue(stopped.stderr.contains("PA004"), stopped.stderr)
        XCTAssertEqual(try String(contentsOf: rejects, encoding: .utf8).split(separator: "\n").count, 2)
        // All or nothing says that nothing was stored.
        let valid = directory.appendingPathComponent("valid.ndjson")
        try (EventFixtures.event() + "\n").write(to: valid, atomically: true, encoding: .utf8)
        let strictStopped = try permaudit(["ingest", valid.path])
        XCTAssertEqual(strictStopped.status, 1)
        XCTAssertTrue(strictStopped.stderr.contains("all or nothing: nothing from the input was stored"), strictStopped.stderr)
    }

    func testUnmigratedExternalDatabaseIsReported() throws {
        let bare = try TestDatabase.create(migrated: false)
        defer { TestDatabase.drop(bare) }
        let run = try permaudit(["events"], environment: ["DATABASE_URL": bare])
        XCTAssertEqual(run.status, 1)
        XCTAssertTrue(run.stderr.contains("run 'permaudit migrate'"), run.stderr)
        XCTAssertEqual(try permaudit(["migrate"], environment: ["DATABASE_URL": bare]).status, 0)
        XCTAssertEqual(try permaudit(["events"], environment: ["DATABASE_URL": bare]).status, 0)
    }
}

/// The projector as a process: killed with SIGKILL at random moments and restarted, it ends
/// where a clean rebuild ends; `stats` prints what the views hold.
final class ProjectCommandTests: DatabaseTestCase {
    func testKilledProjectorEndsEqualToACleanRebuild() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 11)
        let events = random.events(attempts: 3000, subjects: 300)
        try TestDatabase.append(events, to: db, chunk: 1000)
        // The one-pass build of the empty projection is one transaction: killed while the server
        // runs it, it leaves the projection empty. A lock held here stops the build where it copies
        // the install tables its second connection staged (after the attempts are written), so the
        // kill lands mid-build every time.
        let blocker = try Connection(url: url)
        try blocker.execute("begin")
        try blocker.execute("lock table projection.permission_state in share mode")
        let onePass = Process()
        onePass.executableURL = CLITests.binary
        onePass.arguments = ["project", "--once"]
        onePass.environment = ProcessInfo.processInfo.environment.merging(["DATABASE_URL": url]) { $1 }
        onePass.standardOutput = FileHandle.nullDevice
        onePass.standardError = FileHandle.nullDevice
        let building = "select count(*) from pg_stat_activity where query like '%finish_build%' and pid <> pg_backend_pid()"
        try onePass.run()
        let deadline = Date().addingTimeInterval(60)
        while try db.query(building + " and wait_event_type = 'Lock'").scalar(Int.self) == 0 {
            guard onePass.isRunning, Date() < deadline else { return XCTFail("the projector's build did not wait for the lock") }
            usleep(5_000)
        }
        kill(onePass.processIdentifier, SIGKILL)
        onePass.waitUntilExit()
        try blocker.execute("rollback")
        while try db.query(building).scalar(Int.self) > 0 {  // the server ends the statement, then finds the client gone
            guard Date() < deadline else { return XCTFail("the killed projector's build did not end") }
            usleep(10_000)
        }
        XCTAssertEqual(try db.query("select count(*) from projection.attempts").scalar(Int.self), 0, "nothing of the killed build is stored")
        XCTAssertEqual(try db.query("select position from projection.checkpoint").scalar(Int.self), 0)

        var kills = 0
        var generator = RandomEvents.Generator(seed: 3)
        for _ in 0..<6 {
            let process = Process()
            process.executableURL = CLITests.binary
            process.arguments = ["project", "--once", "--batch-size", "40", "--wait"]
            process.environment = ProcessInfo.processInfo.environment.merging(["DATABASE_URL": url]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            Thread.sleep(forTimeInterval: Double.random(in: 0.05...0.6, using: &generator))
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                kills += 1
            }
            process.waitUntilExit()
        }
        XCTAssertGreaterThan(kills, 0, "at least one projector was killed mid-way")
        let finish = try CLITests.run(["project", "--once", "--wait"], url: url)
        XCTAssertEqual(finish.status, 0, finish.stderr)
        let afterCrashes = try TestDatabase.analyticsSnapshot(db)
        XCTAssertGreaterThan(afterCrashes.count, 20)
        let rebuild = try CLITests.run(["project", "--rebuild"], url: url)
        XCTAssertEqual(rebuild.status, 0, rebuild.stderr)
        XCTAssertTrue(rebuild.stdout.hasPrefix("rebuilt: projected \(events.count) events"), rebuild.stdout)
        XCTAssertEqual(try TestDatabase.analyticsSnapshot(db), afterCrashes)
        let status = try CLITests.run(["project", "--status"], url: url)
        XCTAssertTrue(status.stdout.contains("events behind: 0"), status.stdout)
    }

    /// An event behind a transaction still open is counted behind, and the status says why
    /// `--once` leaves it: no reader in committed order takes it before that transaction ends.
    func testStatusSaysWhichEventsWaitForAnOpenTransaction() throws {
        let holder = try Connection(url: url)
        try holder.execute("begin")
        try EventLog(connection: holder).append([EventFixtures.event(subject: "held")])
        try EventLog(connection: try Connection(url: url)).append([EventFixtures.event(subject: "after")])
        let status = try CLITests.run(["project", "--status"], url: url)
        XCTAssertTrue(status.stdout.contains("events behind: 1 (1 wait for an older transaction still open: projected once it ends)\n"),
                      status.stdout)
        try holder.execute("commit")
        XCTAssertTrue(try CLITests.run(["project", "--status"], url: url).stdout.contains("events behind: 2\n"))
    }

    /// `project --follow --poll 1` on `databaseURL`, its standard error in the pipe.
    func startFollower(databaseURL: String) throws -> (Process, Pipe) {
        let stderr = Pipe()
        let process = Process()
        process.executableURL = CLITests.binary
        process.arguments = ["project", "--follow", "--poll", "1"]
        process.environment = ProcessInfo.processInfo.environment.merging(["DATABASE_URL": databaseURL]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stderr
        try process.run()
        return (process, stderr)
    }

    /// Stops a follower with SIGTERM: its exit status and what it wrote on standard error.
    func stopFollower(_ process: Process, _ stderr: Pipe) -> (Int32, String) {
        process.terminate()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
    }

    /// Waits up to 30 s until the checkpoint counts `count` events projected.
    static func waitForProjected(_ count: Int, _ db: Connection) throws -> Bool {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if try db.query("select events_projected from projection.checkpoint").scalar(Int.self) == count { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    func testFollowerReconnectsAfterLosingItsConnection() throws {
        let db = try Connection(url: url)
        try TestDatabase.append([EventFixtures.event(subject: "reconnect-a")], to: db)
        let (process, stderr) = try startFollower(databaseURL: url)
        XCTAssertTrue(try Self.waitForProjected(1, db))
        let second = try CLITests.run(["project", "--once"], url: url)
        XCTAssertEqual(second.status, 1)
        XCTAssertTrue(second.stderr.contains("another projector is running") && second.stderr.contains("(use --wait to queue behind it;"), second.stderr)
        // Its backend terminated (as by a database restart): it connects again and goes on.
        XCTAssertEqual(try TestDatabase.terminateOtherClients(db), 1)
        try TestDatabase.append([EventFixtures.event(subject: "reconnect-b")], to: db)
        XCTAssertTrue(try Self.waitForProjected(2, db), "the follower projected the event appended after the loss")
        let (status, log) = stopFollower(process, stderr)
        XCTAssertEqual(status, 0)
        XCTAssertTrue(log.contains("lost the database connection"), log)
        XCTAssertTrue(log.contains("reconnected; following the log again"), log)
        XCTAssertTrue(log.hasSuffix("stopped\n"), log)
    }

    /// A batch that fails for a passing reason (here a lock time-out while another session holds
    /// the checkpoint table) is rolled back and tried again; the follower goes on.
    func testFollowerRetriesABatchThatFailedForAPassingReason() throws {
        let db = try Connection(url: url)
        try TestDatabase.append([EventFixtures.event(subject: "retry-a")], to: db)
        let (process, stderr) = try startFollower(databaseURL: url + "&options=-c%20lock_timeout%3D200")
        XCTAssertTrue(try Self.waitForProjected(1, db))
        let locker = try Connection(url: url)
        try locker.query("begin")
        try locker.query("lock table projection.checkpoint in access exclusive mode")
        try TestDatabase.append([EventFixtures.event(subject: "retry-b")], to: db)
        Thread.sleep(forTimeInterval: 3)  // the follower wakes (NOTIFY, poll) and times out on the lock
        XCTAssertTrue(process.isRunning, "the follower is still running")
        try locker.query("rollback")
        XCTAssertTrue(try Self.waitForProjected(2, db), "the follower projected the event once the lock was gone")
        let (status, log) = stopFollower(process, stderr)
        XCTAssertEqual(status, 0)
        XCTAssertTrue(log.contains("the batch failed and was rolled back (PostgreSQL 55P03"), log)
        XCTAssertTrue(log.hasSuffix("stopped\n"), log)
        // A catch-up's line has no duration: the time since the follower started is not it.
        let lines = log.split(separator: "\n").filter { $0.hasPrefix("projected ") }
        XCTAssertFalse(lines.isEmpty, log)
        XCTAssertTrue(lines.allSatisfy { $0.contains(" batch, checkpoint ") || $0.contains(" batches, checkpoint ") }, log)
    }

    func testStatsCommands() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 12)
        try EventLog(connection: db).append(random.events(attempts: 500, subjects: 80))
        let behind = try CLITests.run(["stats", "picker"], url: url)
        XCTAssertTrue(behind.stderr.contains("note: ") && behind.stderr.contains("are not projected yet"), behind.stderr)
        XCTAssertEqual(try CLITests.run(["project", "--once"], url: url).status, 0)
        let denial = try CLITests.run(["stats", "denial", "--by", "platform,osMajor", "--format", "csv"], url: url)
        XCTAssertEqual(denial.status, 0, denial.stderr)
        XCTAssertFalse(denial.stderr.contains("not projected yet"), denial.stderr)
        let lines = denial.stdout.split(separator: "\n")
        XCTAssertTrue(lines[0].hasPrefix("platform,osMajor,prompted,denied,denial_rate,denial_low,denial_high"), String(lines[0]))
        // The CSV's prompted totals equal the view's.
        let total = lines.dropFirst().map { Int($0.split(separator: ",")[2])! }.reduce(0, +)
        XCTAssertEqual(total, try db.query("select sum(prompted)::int from analytics.permission_outcomes_daily").scalar(Int.self))

        let priming = try CLITests.run(["stats", "priming", "--format", "json"], url: url)
        XCTAssertEqual(priming.status, 0, priming.stderr)
        XCTAssertTrue(priming.stdout.contains("\"arm\":\"primed\""), priming.stdout)
        XCTAssertTrue(priming.stdout.contains("\"variant\":\"treatment\""), priming.stdout)
        XCTAssertTrue(priming.stdout.contains("\"p_value\":"), priming.stdout)
        XCTAssertTrue(priming.stdout.contains("\"z\":"), priming.stdout)  // the contract's pooled z, beside its p-value
        XCTAssertFalse(priming.stdout.contains("nan"))
        // One JSON document: an array of the two tables (arms, experiments).
        let document = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(priming.stdout.utf8)) as? [[String: Any]])
        XCTAssertEqual(document.count, 2)
        XCTAssertEqual((document[0]["rows"] as? [[String: Any]])?.compactMap { $0["arm"] as? String }.sorted(), ["primed", "unprimed"])
        // exp-1 runs in both apps: its arms are pooled unless grouped (or filtered) by app, and it says so.
        XCTAssertEqual(priming.stderr, "note: experiment exp-1 runs in 2 apps; its arms are pooled across them (--by app compares them per app)\n")
        XCTAssertEqual(try CLITests.run(["stats", "priming", "--by", "app"], url: url).stderr, "")
        XCTAssertEqual(try CLITests.run(["stats", "priming", "--app", "com.example.a"], url: url).stderr, "")

        let picker = try CLITests.run(["stats", "picker", "--by", "week,flow", "--from", "2026-01-01", "--to", "2030-12-31"], url: url)
        XCTAssertEqual(picker.status, 0, picker.stderr)
        XCTAssertTrue(picker.stdout.contains("picker_adoption"))
        // Every statistic groups by every dimension.
        for which in ["denial", "priming", "picker"] {
            let all = try CLITests.run(["stats", which, "--by", "day,week,app,platform,osMajor,appVersion,permission,flow", "--format", "csv"], url: url)
            XCTAssertEqual(all.status, 0, "\(which): \(all.stderr)")
        }
        // An OS major is always grouped with its platform: iOS 15 and Android 15 are not one group.
        let primingBy = try CLITests.run(["stats", "priming", "--by", "osMajor,flow", "--format", "csv"], url: url)
        XCTAssertTrue(primingBy.stdout.hasPrefix("platform,osMajor,flow,arm,attempts"), primingBy.stdout)
        let blocks = primingBy.stdout.components(separatedBy: "\n\n")
        XCTAssertEqual(blocks.count, 2, primingBy.stdout)
        XCTAssertTrue(blocks[1].hasPrefix("platform,osMajor,flow,experiment,variant,attempts"), primingBy.stdout)
        let byOSMajor = try CLITests.run(["stats", "denial", "--by", "osMajor", "--format", "csv"], url: url)
        XCTAssertEqual(byOSMajor.stdout, try CLITests.run(["stats", "denial", "--by", "platform,osMajor", "--format", "csv"], url: url).stdout)
        // Picker by permission: picker attempts form the group without one; the groups add up.
        let byPermission = try CLITests.run(["stats", "picker", "--by", "permission", "--format", "csv"], url: url)
        XCTAssertEqual(byPermission.status, 0, byPermission.stderr)
        let rows = byPermission.stdout.split(separator: "\n").dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false) }
        XCTAssertGreaterThan(rows.count, 1)
        XCTAssertEqual(rows.map { Int($0[1])! }.reduce(0, +), try db.query("select sum(picker_attempts)::int from analytics.picker_adoption_daily").scalar(Int.self))
        XCTAssertEqual(rows.map { Int($0[2])! }.reduce(0, +), try db.query("select sum(permission_attempts)::int from analytics.picker_adoption_daily").scalar(Int.self))
        XCTAssertEqual(try CLITests.run(["stats", "denial", "--from", "2026-13-01"], url: url).status, 64)
        let reversed = try CLITests.run(["stats", "denial", "--from", "2026-11-12", "--to", "2026-11-01"], url: url)
        XCTAssertEqual(reversed.status, 64)
        XCTAssertTrue(reversed.stderr.contains("'--from' (2026-11-12) is after '--to' (2026-11-01)"), reversed.stderr)
        let empty = try CLITests.run(["stats", "denial", "--app", "no.such.app"], url: url)
        XCTAssertTrue(empty.stdout.contains("(no data for this selection)"), empty.stdout)

        // An experiment without a control variant: its variants have no baseline, and a note says so.
        func attempt(app: String, variant: String, answer: String) throws {
            let attempt = UUID()
            try TestDatabase.append(["permission.prompted", answer].map {
                EventFixtures.event(type: $0, subject: "exp-nc-\(variant)", app: app, attempt: attempt,
                                    overrides: ["experiments": "{\"exp-nc\":\"\(variant)\"}", "attributes": "{}"])
            }, to: db)
            XCTAssertEqual(try CLITests.run(["project", "--once"], url: url).status, 0)
        }
        try attempt(app: "com.example.nc", variant: "A", answer: "permission.granted")
        let noControl = try CLITests.run(["stats", "priming", "--app", "com.example.nc", "--format", "csv"], url: url)
        XCTAssertEqual(noControl.stderr, "note: experiment exp-nc has no variant named 'control'; its variants are shown without a comparison\n")
        XCTAssertTrue(noControl.stdout.contains("\nexp-nc,A,1,1.0,"), noControl.stdout)

        // The same key with a control in another app: compared per app, one group has no baseline.
        try attempt(app: "com.example.nc2", variant: "control", answer: "permission.denied")
        let byApp = try CLITests.run(["stats", "priming", "--by", "app", "--format", "csv"], url: url)
        XCTAssertTrue(byApp.stderr.contains("note: experiment exp-nc has no variant named 'control' in 1 of its 2 groups; their variants are shown without a comparison\n"), byApp.stderr)
        let pooled = try CLITests.run(["stats", "priming", "--format", "csv"], url: url)
        XCTAssertTrue(pooled.stderr.contains("note: experiment exp-nc runs in 2 apps"), pooled.stderr)
        XCTAssertFalse(pooled.stderr.contains("exp-nc has no variant"), pooled.stderr)
    }
}
