import Foundation
import Postgres
import TestSupport
import XCTest

/// The `permaudit` executable, run as a user runs it.
final class CLITests: XCTestCase {
    var url = ""
    override func setUpWithError() throws { url = try TestDatabase.create() }
    override func tearDown() { TestDatabase.drop(url) }

    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static var binary: URL {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("permaudit")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return TestDatabase.packageRoot.appendingPathComponent(".build/debug/permaudit")
    }

    func permaudit(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> Run {
        let process = Process()
        process.executableURL = Self.binary
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
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
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

    func testUsageErrorsExit64() throws {
        for arguments in [["frobnicate"], ["ingest", "--nope"], ["events", "--limit"], ["events", "--limit", "x"], ["db", "explode"]] {
            let run = try permaudit(arguments)
            XCTAssertEqual(run.status, 64, "\(arguments)")
            XCTAssertTrue(run.stderr.hasPrefix("Error: "), run.stderr)
            XCTAssertTrue(run.stderr.contains("Usage: "), run.stderr)
            XCTAssertEqual(run.stdout, "")
        }
    }

    func testAppendIngestAndEvents() throws {
        let event = EventFixtures.event(subject: "cli-subject")
        let appended = try permaudit(["append"], stdin: event)
        XCTAssertEqual(appended.status, 0, appended.stderr)
        XCTAssertTrue(appended.stdout.hasPrefix("appended "), appended.stdout)
        XCTAssertTrue(try permaudit(["append", event]).stdout.hasPrefix("duplicate "))

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

        let missing = try permaudit(["ingest", directory.appendingPathComponent("nope").path])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderr.contains("no such readable file"))
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
