import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// `simulate`, `report` and `demo` as a user runs them.
final class ReportCommandTests: DatabaseTestCase {
    var directory: URL!
    override func setUpWithError() throws {
        try super.setUpWithError()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("report-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }
    override func tearDown() {
        try? FileManager.default.removeItem(at: directory)
        super.tearDown()
    }

    func permaudit(_ arguments: [String], environment: [String: String] = [:]) throws -> CLITests.Run {
        try CLITests.run(arguments, url: url, environment: environment)
    }

    func testSimulateToAFileIsDeterministicBySeed() throws {
        var files: [String] = []
        for name in ["a", "b"] {
            let path = directory.appendingPathComponent("\(name).ndjson").path
            let run = try permaudit(["simulate", "--seed", "3", "--subjects", "50", "--days", "7", "--start", "2026-10-01", "--out", path])
            XCTAssertEqual(run.status, 0, run.stderr)
            XCTAssertTrue(run.stdout.contains("True parameters"), run.stdout)
            XCTAssertTrue(run.stdout.contains("denial at the dialog, ios: unprimed 32.0%"), run.stdout)
            files.append(try String(contentsOfFile: path, encoding: .utf8))
        }
        XCTAssertEqual(files[0], files[1])
        XCTAssertTrue(files[0].hasPrefix("{\"eventId\":"))
        XCTAssertEqual(try permaudit(["simulate", "--start", "October"]).status, 64)
        XCTAssertEqual(try permaudit(["simulate", "--live", "--out", "x"]).status, 64)
    }

    func testSimulateIngestProjectAndReport() throws {
        let simulated = try permaudit(["simulate", "--subjects", "300", "--start", "2026-10-01"])
        XCTAssertEqual(simulated.status, 0, simulated.stderr)
        XCTAssertTrue(simulated.stdout.contains("ingested: appended "), simulated.stdout)
        XCTAssertEqual(try permaudit(["project", "--once"]).status, 0)

        let out = directory.appendingPathComponent("r").path
        let report = try permaudit(["report", "--out", out, "--app", "com.example.snap", "--from", "2026-10-02"])
        XCTAssertEqual(report.status, 0, report.stderr)
        for file in ["report.md", "report.html", "report.json", "csv/summary.csv", "csv/rates_by_platform.csv"] {
            XCTAssertTrue(FileManager.default.fileExists(atPath: out + "/" + file), file)
            XCTAssertTrue(report.stdout.contains(out + "/" + file), file)
        }
        let json = try String(contentsOfFile: out + "/report.json", encoding: .utf8)
        XCTAssertTrue(json.contains("\"filters\":{\"app\":\"com.example.snap\",\"platform\":null,\"from\":\"2026-10-02\",\"to\":null}"), json)

        // The analyst, who reads the views and nothing else (not the migration record either).
        let analyst = url + "&options=-c%20role%3Dpermaudit_analyst"
        let stats = try CLITests.run(["stats", "denial"], url: analyst)
        XCTAssertEqual(stats.status, 0, stats.stderr)
        let analystOut = directory.appendingPathComponent("analyst").path
        let analystReport = try CLITests.run(["report", "--out", analystOut, "--format", "json"], url: analyst)
        XCTAssertEqual(analystReport.status, 0, analystReport.stderr)
        let analystJSON = try String(contentsOfFile: analystOut + "/report.json", encoding: .utf8)
        XCTAssertTrue(analystJSON.contains("The compliance findings need read access"), analystJSON)
        XCTAssertTrue(analystJSON.contains("\"id\":\"priming\""), analystJSON)
        // The auditor reads the views and the findings, not how far the projector is behind.
        let auditorOut = directory.appendingPathComponent("auditor").path
        let auditorReport = try CLITests.run(["report", "--out", auditorOut, "--format", "json"], url: url + "&options=-c%20role%3Dpermaudit_auditor")
        XCTAssertEqual(auditorReport.status, 0, auditorReport.stderr)
        XCTAssertTrue(try String(contentsOfFile: auditorOut + "/report.json", encoding: .utf8).contains("\"id\":\"compliance\""))

        let onlyJSON = directory.appendingPathComponent("j").path
        XCTAssertEqual(try permaudit(["report", "--out", onlyJSON, "--format", "json"]).status, 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: onlyJSON), ["report.json"])
        for bad in [["--format", "pdf"], ["--platform", "windows"], ["--to", "2026-13-01"], ["--from", "2026-11-12", "--to", "2026-11-01"],
                    ["--app", "<script>x</script>\"&"], ["--app", ""], ["--app", String(repeating: "a", count: 256)]] {
            let run = try permaudit(["report"] + bad)
            XCTAssertEqual(run.status, 64, "\(bad)")
            XCTAssertTrue(run.stderr.contains(bad[0]), run.stderr)
            if bad[0] == "--app" { XCTAssertTrue(run.stderr.contains("1-255 characters [A-Za-z0-9._-]"), run.stderr) }
        }
    }

    /// An --out that cannot be written fails with the path and the reason, not Foundation's dump.
    func testAnUnwritableOutNamesThePathAndTheReason() throws {
        let file = directory.appendingPathComponent("file").path
        try Data().write(to: URL(fileURLWithPath: file))
        let blocked = directory.appendingPathComponent("blocked").path
        try FileManager.default.createDirectory(atPath: blocked + "/report.md", withIntermediateDirectories: true)
        for (out, message) in [("/proc/x", "/proc/x: cannot create the report directory: "),
                               (file, file + ": cannot create the report directory: it exists and is not a directory\n"),
                               (file + "/sub", file + "/sub: cannot create the report directory: Not a directory\n"),
                               (blocked, blocked + "/report.md: cannot write the file: ")] {
            let run = try permaudit(["report", "--out", out, "--format", "md"])
            XCTAssertEqual(run.status, 1, out)
            XCTAssertTrue(run.stderr.hasPrefix("Error: " + message), run.stderr)
            XCTAssertFalse(run.stderr.contains("Domain"), run.stderr)
        }
    }

    func testLiveTrafficStopsAfterItsDuration() throws {
        let run = try permaudit(["simulate", "--live", "--rate", "200", "--duration", "2", "--subjects", "50"])
        XCTAssertEqual(run.status, 0, run.stderr)
        let appended: Int = try Connection(url: url).query("select count(*)::bigint from audit.events").scalar()
        XCTAssertGreaterThan(appended, 50)
        XCTAssertTrue(run.stdout.hasPrefix("appended \(appended) events"), run.stdout)
        // Run again with the same (default) seed: new event ids, not conflicts with the first run.
        let again = try permaudit(["simulate", "--live", "--rate", "200", "--duration", "1", "--subjects", "50"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertGreaterThan(try Connection(url: url).query("select count(*)::bigint from audit.events").scalar(Int.self), appended)
    }

    /// Two permission attempts whose experiment keys and variants hold terminal controls: key
    /// `withControl` has a `control` variant and a variant with a bidi override, key `withoutControl`
    /// (an OSC title sequence) has no control variant, so the notes name it.
    static let withControl = "\u{1B}[31mRED", withoutControl = "\u{1B}]0;pwned\u{7}"
    static var hostileExperiments: [String] {
        ["control", "\u{202E}evil"].flatMap { variant in
            let attempt = UUID()
            let experiments = "{" + EventFixtures.quoted(withControl) + ":" + EventFixtures.quoted(variant) + ","
                + EventFixtures.quoted(withoutControl) + ":\"v\"}"
            return [EventFixtures.event(type: "permission.prompted", subject: variant, attempt: attempt,
                                        overrides: ["experiments": experiments], removing: ["attributes"]),
                    EventFixtures.event(type: "permission.granted", subject: variant, occurredAt: "2026-10-03T09:15:29.000Z", attempt: attempt,
                                        overrides: ["experiments": experiments], removing: ["attributes"])]
        }
    }

    func assertNoTerminalControls(_ output: String, file: StaticString = #filePath, line: UInt = #line) {
        let raw = output.unicodeScalars.filter { ($0.properties.generalCategory == .control && $0 != "\n") || $0.properties.isBidiControl }
        XCTAssertEqual(raw.map { String($0.value, radix: 16) }, [], output, file: file, line: line)
    }

    /// Client text reaches no terminal raw: the notes of `report` and `stats priming` show its
    /// control characters as `\u{1B}`.
    func testControlCharactersFromClientsReachNoTerminal() throws {
        try EventLog(connection: try Connection(url: url)).append(Self.hostileExperiments)
        XCTAssertEqual(try permaudit(["project", "--once"]).status, 0)
        for arguments in [["report", "--out", directory.path], ["stats", "priming"]] {
            let run = try permaudit(arguments)
            XCTAssertEqual(run.status, 0, run.stderr)
            assertNoTerminalControls(run.stdout + run.stderr)
            XCTAssertTrue(run.stderr.contains("\\u{1B}]0;pwned\\u{7}"), run.stderr)
        }
    }

    /// The main job, small: the embedded database of $PERMAUDIT_HOME (the test cluster), run
    /// twice (the second run reuses the log) and with --fresh.
    func testDemoRunsAgainAndStartsOverWithFresh() throws {
        let environment = ["PERMAUDIT_HOME": TestDatabase.home.path, "DATABASE_URL": ""]
        let out = directory.appendingPathComponent("demo").path
        let first = try permaudit(["demo", "--fresh", "--subjects", "400", "--out", out], environment: environment)
        XCTAssertEqual(first.status, 0, first.stderr + first.stdout)
        for expected in ["simulated ", "ingested: appended ", "projected ", "Headline (95% intervals):", "denial rate ",
                         "priming-2026 treatment: access ", "True parameters", "Report: \(out)/report.html"] {
            XCTAssertTrue(first.stdout.contains(expected), "missing '\(expected)' in\n\(first.stdout)")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: out + "/report.html"))
        // Client text with terminal controls, added to the log: the headline shows them as \u{1B}.
        let demoDatabase = try TestDatabase.cluster.url(database: EmbeddedCluster.databaseName)
        try EventLog(connection: try Connection(url: demoDatabase)).append(Self.hostileExperiments)
        let again = try permaudit(["demo", "--subjects", "400", "--out", out], environment: environment)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stdout.contains("reusing them"), again.stdout)
        XCTAssertTrue(again.stderr.contains("note: --subjects 400 was not used: nothing is simulated while the log holds events"), again.stderr)
        XCTAssertTrue(again.stdout.contains("projected 4 events"), again.stdout)
        XCTAssertTrue(again.stdout.contains("com.example.app \\u{1B}[31mRED \\u{202E}evil: access "), again.stdout)
        assertNoTerminalControls(again.stdout + again.stderr)
        let fresh = try permaudit(["demo", "--fresh", "--subjects", "400", "--out", out], environment: environment)
        XCTAssertEqual(fresh.status, 0, fresh.stderr)
        XCTAssertTrue(fresh.stdout.contains("dropped the demo database"), fresh.stdout)
        XCTAssertTrue(fresh.stdout.contains("ingested: appended "), fresh.stdout)
    }
}
