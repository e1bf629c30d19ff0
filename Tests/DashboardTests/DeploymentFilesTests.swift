import EventLog
import Foundation
import TestSupport
import XCTest

/// docker-compose.yml and the Dockerfile refer only to files that exist in the repository and to
/// permaudit subcommands and options that exist in the CLI.
final class DeploymentFilesTests: XCTestCase {
    let root = TestDatabase.packageRoot

    func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// Lines without comments.
    func lines(_ path: String) throws -> [String] {
        try text(path).split(separator: "\n").map { line in
            let text = String(line)
            if text.trimmingCharacters(in: .whitespaces).hasPrefix("#") { return "" }
            return text.range(of: " #").map { String(text[..<$0.lowerBound]) } ?? text
        }
    }

    /// The Dockerfile's COPY instructions from the build context: (repository path, image path).
    func dockerfileCopies() throws -> [(source: String, destination: String)] {
        try lines("Dockerfile").compactMap { line in
            let words = line.split(separator: " ").map(String.init)
            guard words.first == "COPY", !words.contains(where: { $0.hasPrefix("--from") }), words.count == 3 else { return nil }
            return (words[1], words[2])
        }
    }

    func testDockerfileCopiesExistingFiles() throws {
        let copies = try dockerfileCopies()
        XCTAssertTrue(copies.contains { $0.source == "sql" && $0.destination == "/usr/local/share/permaudit/sql" })
        for copy in copies {
            XCTAssertTrue(FileManager.default.fileExists(atPath: root.appendingPathComponent(copy.source).path), copy.source)
        }
        let dockerfile = try text("Dockerfile")
        XCTAssertTrue(dockerfile.contains("FROM swift:6.0-bookworm AS builder"))
        XCTAssertTrue(dockerfile.contains("FROM debian:bookworm-slim"))
        XCTAssertTrue(dockerfile.contains("swift build -c release"))
        XCTAssertTrue(dockerfile.contains("libpq5"))
    }

    func testComposeRefersToExistingFiles() throws {
        var checked = 0
        // Container paths that come from the repository: the image's COPYs and the bind mounts.
        var containerToRepository: [(String, String)] = try dockerfileCopies().map { ($0.destination, $0.source) }
        for line in try lines("docker-compose.yml") {
            let item = line.trimmingCharacters(in: .whitespaces)
            if item.hasPrefix("- ./") {
                let parts = item.dropFirst(2).split(separator: ":").map(String.init)
                XCTAssertTrue(FileManager.default.fileExists(atPath: root.appendingPathComponent(parts[0]).path), parts[0])
                containerToRepository.append((parts[1], parts[0]))
                checked += 1
            }
            if item.hasPrefix("dockerfile:") {
                let file = item.dropFirst("dockerfile:".count).trimmingCharacters(in: .whitespaces)
                XCTAssertTrue(FileManager.default.fileExists(atPath: root.appendingPathComponent(file).path), file)
                checked += 1
            }
        }
        let text = try lines("docker-compose.yml").joined(separator: "\n")
        let paths = try NSRegularExpression(pattern: #"/(?:usr/local/share/permaudit|etc/grafana/dashboards)/[\w./-]+"#)
        for match in paths.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            let path = String(text[Range(match.range, in: text)!])
            guard let (prefix, source) = containerToRepository.first(where: { path == $0.0 || path.hasPrefix($0.0 + "/") }) else {
                XCTFail("\(path): not copied into the image nor mounted"); continue
            }
            let file = source + path.dropFirst(prefix.count)
            XCTAssertTrue(FileManager.default.fileExists(atPath: root.appendingPathComponent(file).path), "\(path) -> \(file)")
            checked += 1
        }
        XCTAssertGreaterThanOrEqual(checked, 6)
    }

    func testSecretsComeFromTheEnvironmentFile() throws {
        let compose = try text("docker-compose.yml")
        let example = try text(".env.example")
        let required = try NSRegularExpression(pattern: #"(?<!\$)\$\{(\w+):\?"#)
        let names = Set(required.matches(in: compose, range: NSRange(compose.startIndex..., in: compose)).map {
            String(compose[Range($0.range(at: 1), in: compose)!])
        })
        XCTAssertTrue(names.isSuperset(of: ["POSTGRES_PASSWORD", "PERMAUDIT_ANALYST_PASSWORD", "GRAFANA_ADMIN_PASSWORD"]))
        for name in names { XCTAssertTrue(example.contains("\n\(name)="), "\(name) missing from .env.example") }
        XCTAssertTrue(try text(".gitignore").split(separator: "\n").contains(".env"), ".env stays out of git")
        // Every setting the compose files read, required or with a default, is in .env.example.
        for file in ["docker-compose.yml", Self.externalPostgres] {
            for name in try Self.names(#"(?<!\$)\$\{(\w+)"#, in: lines(file).joined(separator: "\n")) {
                XCTAssertTrue(example.contains("\n\(name)="), "\(file): \(name) missing from .env.example")
            }
        }
        // The data source provisioning reads these from Grafana's environment.
        let datasource = try text("dashboards/provisioning/datasources/permaudit.yaml")
        let read = try Self.names(#"\$\{(\w+)\}"#, in: datasource)
        XCTAssertTrue(read.isSuperset(of: ["PERMAUDIT_GRAFANA_DB_HOST", "POSTGRES_DB", "PERMAUDIT_GRAFANA_DB_SSLMODE",
                                           "PERMAUDIT_GRAFANA_DB_ROOT_CERT", "PERMAUDIT_ANALYST_PASSWORD"]), "\(read)")
        for name in read {
            XCTAssertTrue(compose.contains("      \(name): "), "\(name) not given to grafana")
        }
    }

    static let externalPostgres = "deploy/compose.external-postgres.yml"

    static func names(_ pattern: String, in text: String) throws -> Set<String> {
        let regex = try NSRegularExpression(pattern: pattern)
        return Set(regex.matches(in: text, range: NSRange(text.startIndex..., in: text)).map { String(text[Range($0.range(at: 1), in: text)!]) })
    }

    /// The services of a compose file: name -> the lines of its definition (comments removed).
    func services(_ path: String) throws -> [String: [String]] {
        var result: [String: [String]] = [:], current: String?, inServices = false
        for line in try lines(path) where !line.trimmingCharacters(in: .whitespaces).isEmpty {
            let indent = line.prefix { $0 == " " }.count
            if indent == 0 { inServices = line.hasPrefix("services:"); current = nil; continue }
            guard inServices else { continue }
            if indent == 2 { current = String(line.trimmingCharacters(in: .whitespaces).dropLast()); result[current!] = []; continue }
            if let current { result[current]!.append(line) }
        }
        return result
    }

    /// The database server and TLS mode come from .env (defaults: the postgres service, no TLS),
    /// for the owner's connections and Grafana's alike.
    func testTheDatabaseServerIsASetting() throws {
        let compose = try lines("docker-compose.yml").joined(separator: "\n")
        XCTAssertEqual(compose.components(separatedBy: "postgres:5432").count - 1, compose.components(separatedBy: "${PERMAUDIT_DB_HOST:-postgres:5432}").count - 1)
        XCTAssertEqual(compose.components(separatedBy: "sslmode").count - 1, compose.components(separatedBy: "sslmode=${PERMAUDIT_DB_SSLMODE:-disable}").count - 1)
        XCTAssertTrue(compose.contains("PERMAUDIT_GRAFANA_DB_HOST: ${PERMAUDIT_DB_HOST:-postgres:5432}"))
        XCTAssertTrue(compose.contains("PERMAUDIT_GRAFANA_DB_SSLMODE: ${PERMAUDIT_DB_SSLMODE:-disable}"))
        let base = try services("docker-compose.yml")
        for (name, body) in base where body.contains(where: { $0.contains("<<: *permaudit") }) || name == "migrate" {
            XCTAssertFalse(body.contains { $0.contains("DATABASE_URL:") && !$0.contains("*database-url") }, "\(name) has its own DATABASE_URL")
        }
    }

    /// deploy/compose.external-postgres.yml leaves a valid project without the postgres service:
    /// every service that waited for postgres no longer does, postgres never starts, and every
    /// service that connects gets the CA certificate.
    func testTheExternalPostgresOverride() throws {
        let base = try services("docker-compose.yml"), override = try services(Self.externalPostgres)
        XCTAssertTrue(Set(override.keys).isSubset(of: Set(base.keys)), "\(override.keys) not all in docker-compose.yml")
        XCTAssertTrue(try XCTUnwrap(override["postgres"]).contains { $0.contains("profiles:") }, "postgres gets a profile nobody enables")
        for (name, body) in base {
            let dependsOnPostgres = body.indices.contains { body[$0].trimmingCharacters(in: .whitespaces) == "depends_on:" && body[($0 + 1)...].prefix { $0.hasPrefix("      ") }.contains { $0.trimmingCharacters(in: .whitespaces) == "postgres:" } }
            if dependsOnPostgres {
                XCTAssertTrue(override[name]?.contains { $0.contains("depends_on: !reset") } ?? false, "\(name) still depends on postgres")
            }
            let connects = body.contains { $0.contains("<<: *permaudit") || $0.contains("DATABASE_URL: *database-url") } || name == "grafana"
            if connects {
                let lines = override[name] ?? []
                XCTAssertTrue(lines.contains { $0.contains("${PERMAUDIT_DB_ROOT_CERT:?") && $0.hasSuffix(":/etc/permaudit/db-root.crt:ro") }, "\(name) gets no CA certificate")
                let variable = name == "grafana" ? "PERMAUDIT_GRAFANA_DB_ROOT_CERT" : "PGSSLROOTCERT"
                XCTAssertTrue(lines.contains { $0.trimmingCharacters(in: .whitespaces) == "\(variable): /etc/permaudit/db-root.crt" }, "\(name): \(variable)")
            }
        }
    }

    /// `permaudit <subcommand> [action] --option ...` as written in the compose file's commands
    /// (every one of a shell command line).
    func composeInvocations() throws -> [(subcommand: String, action: String?, options: [String])] {
        try lines("docker-compose.yml").flatMap { line -> [(String, String?, [String])] in
            let words = line.replacingOccurrences(of: "[\",\\[\\]]", with: " ", options: .regularExpression)
                .replacingOccurrences(of: ";", with: " ; ").split(separator: " ").map(String.init)
            return words.indices.filter { words[$0] == "permaudit" && $0 + 1 < words.count }.map { start in
                let rest = words[(start + 1)...].prefix { !["&&", "||", ";", ">"].contains($0) }
                let action = rest.dropFirst().first.flatMap { $0.hasPrefix("-") ? nil : $0 }
                return (rest.first!, action, rest.dropFirst().filter { $0.hasPrefix("--") })
            }
        }
    }

    func testComposeCommandsExistInTheCLI() throws {
        let invocations = try composeInvocations()
        XCTAssertEqual(Set(invocations.map(\.subcommand)), ["migrate", "project", "simulate", "audit"])
        XCTAssertEqual(Set(invocations.compactMap(\.action)), ["keygen", "verify", "permissions"])
        for (subcommand, action, options) in invocations {
            let run = try Self.permaudit([subcommand, "--help"])
            XCTAssertEqual(run.status, 0, "permaudit \(subcommand) --help: \(run.stderr)")
            if let action { XCTAssertTrue(run.stdout.contains("  \(action) ") || run.stdout.contains("  \(action)\n"), "permaudit \(subcommand) has no \(action)") }
            for option in options {
                XCTAssertTrue(run.stdout.contains(option), "permaudit \(subcommand) has no \(option)")
            }
        }
    }

    /// deploy/analyst-login.sql fails (psql status 3) without a password or with an empty one,
    /// even when the caller did not set ON_ERROR_STOP; with one, it gives the analyst LOGIN (in a
    /// transaction rolled back: roles belong to the whole test cluster).
    func testAnalystLoginNeedsAPassword() throws {
        // The psql of the server binaries the test cluster runs on (Debian's postgresql package).
        let psql = try PostgresBinaries.locate().path("psql")
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let script = root.appendingPathComponent("deploy/analyst-login.sql").path
        for (arguments, message) in [([], "no password"), (["-v", "analyst_password="], "the password is empty")] {
            let run = try Self.run(psql, [url, "-X"] + arguments + ["-f", script])
            XCTAssertEqual(run.status, 3, "\(arguments): \(run.stderr)")
            XCTAssertTrue(run.stderr.contains("analyst-login.sql: \(message)"), run.stderr)
        }
        let run = try Self.run(psql, [url, "-X", "-At", "-v", "analyst_password=it's a \"secret\"", "-c", "begin", "-f", script,
                                      "-c", "select rolcanlogin and rolpassword like 'SCRAM-SHA-256$%' from pg_authid where rolname = 'permaudit_analyst'",
                                      "-c", "rollback"])
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(run.stdout.split(separator: "\n"), ["BEGIN", "ALTER ROLE", "t", "ROLLBACK"])
    }

    static func permaudit(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("permaudit")
        return try run(FileManager.default.isExecutableFile(atPath: beside.path)
            ? beside.path : TestDatabase.packageRoot.appendingPathComponent(".build/debug/permaudit").path, arguments)
    }

    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile(), stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }
}
