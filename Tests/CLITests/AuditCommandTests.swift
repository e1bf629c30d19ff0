import Foundation
import Postgres
import TestSupport
import XCTest

/// `permaudit audit ...` and `project --follow --seal-every` as a user runs them.
final class AuditCommandTests: DatabaseTestCase {
    var home: URL!
    override func setUpWithError() throws {
        try super.setUpWithError()
        home = FileManager.default.temporaryDirectory.appendingPathComponent("audit-cli-\(UUID().uuidString)")
    }
    override func tearDown() {
        try? FileManager.default.removeItem(at: home)
        super.tearDown()
    }

    func permaudit(_ arguments: [String], stdin: String? = nil) throws -> CLITests.Run {
        try CLITests.run(arguments, url: url, stdin: stdin, environment: ["PERMAUDIT_HOME": home.path])
    }

    /// Removes the key directory of `home`; keygen (run by `run`) then refuses to make another
    /// key for the log sealed up to `lastSeal`, and writes nothing.
    func assertKeygenRefusedAfterTheKeysAreLost(in home: URL, lastSeal: Int, _ run: ([String]) throws -> CLITests.Run,
                                                file: StaticString = #filePath, line: UInt = #line) throws {
        let keys = home.appendingPathComponent("keys")
        try FileManager.default.removeItem(at: keys)
        let refused = try run(["audit", "keygen"])
        XCTAssertEqual(refused.status, 1, refused.stderr, file: file, line: line)
        XCTAssertTrue(refused.stderr.contains("the log is sealed already (seal \(lastSeal), the last, was signed by key"), refused.stderr,
                      file: file, line: line)
        XCTAssertFalse(FileManager.default.fileExists(atPath: keys.path), file: file, line: line)
    }

    /// keygen looks for seals in the embedded cluster's log, where the key goes to its default
    /// directory and the cluster exists: a lost key is not replaced there either; a key for
    /// elsewhere (--key-dir) is made.
    func testKeygenRefusesAnEmbeddedLogThatIsSealedAlready() throws {
        let embedded = FileManager.default.temporaryDirectory.appendingPathComponent("pa-keygen-\(UUID().uuidString.prefix(8))")
        func run(_ arguments: [String]) throws -> CLITests.Run {
            try CLITests.run(arguments, url: "", stdin: EventFixtures.event(), environment: ["PERMAUDIT_HOME": embedded.path])
        }
        defer {
            _ = try? run(["db", "stop"])
            try? FileManager.default.removeItem(at: embedded)
        }
        XCTAssertEqual(try run(["audit", "keygen"]).status, 0, "no cluster yet: nothing to look at")
        XCTAssertEqual(try run(["append"]).status, 0)
        XCTAssertEqual(try run(["audit", "seal"]).status, 0)
        try assertKeygenRefusedAfterTheKeysAreLost(in: embedded, lastSeal: 1, run)
        XCTAssertEqual(try run(["audit", "keygen", "--key-dir", embedded.appendingPathComponent("elsewhere").path]).status, 0)
    }

    /// rotate-key hands the chain over to a new pair, which seals from then on; verify finds the
    /// chain's first key among the retired ones. A rotation stopped after its handover (here the
    /// retired pair's directory could not be made) finishes when run again, with no second handover.
    func testRotateKeyHandsTheChainOverAndVerifyFollows() throws {
        let db = try Connection(url: url)
        let keys = home.appendingPathComponent("keys")
        try TestDatabase.append([EventFixtures.event(subject: "rot-a")], to: db)
        XCTAssertEqual(try permaudit(["audit", "keygen"]).status, 0)
        let unsealed = try permaudit(["audit", "rotate-key"])
        XCTAssertEqual(unsealed.status, 1)
        XCTAssertTrue(unsealed.stderr.contains("nothing is sealed yet"), unsealed.stderr)
        XCTAssertEqual(try permaudit(["audit", "seal"]).status, 0)
        let first = try String(contentsOf: keys.appendingPathComponent("seal-ed25519.pub.pem"), encoding: .utf8)

        let rotated = try permaudit(["audit", "rotate-key"])
        XCTAssertEqual(rotated.status, 0, rotated.stderr)
        XCTAssertTrue(rotated.stdout.hasPrefix("handed the chain over after seal 1 to key "), rotated.stdout)
        // The old private key is gone; its public key is retired, and kept as the chain's first.
        let retired = try FileManager.default.contentsOfDirectory(atPath: keys.appendingPathComponent("retired").path)
        XCTAssertEqual(retired.count, 1, "\(retired)")
        XCTAssertEqual(try String(contentsOf: keys.appendingPathComponent("retired").appendingPathComponent(retired[0]), encoding: .utf8), first)
        XCTAssertEqual(try String(contentsOf: keys.appendingPathComponent("seal-ed25519.first.pub.pem"), encoding: .utf8), first)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: keys.path).sorted(),
                       ["retired", "seal-ed25519.first.pub.pem", "seal-ed25519.pem", "seal-ed25519.pub.pem"])
        try TestDatabase.append([EventFixtures.event(subject: "rot-b")], to: db)
        XCTAssertEqual(try permaudit(["audit", "seal"]).status, 0, "the new key seals")
        let verify = try permaudit(["audit", "verify"])
        XCTAssertEqual(verify.status, 0, verify.stdout + verify.stderr)
        XCTAssertTrue(verify.stdout.contains("seals valid: 2/2"), verify.stdout)
        let newestOnly = try permaudit(["audit", "verify", "--public-key", keys.appendingPathComponent("seal-ed25519.pub.pem").path])
        XCTAssertEqual(newestOnly.status, 1, "a later key does not vouch for the seals before it")

        // Stopped after the handover: a file where the retired pairs go.
        try FileManager.default.moveItem(at: keys.appendingPathComponent("retired"), to: home.appendingPathComponent("retired-aside"))
        try Data().write(to: keys.appendingPathComponent("retired"))
        let stopped = try permaudit(["audit", "rotate-key"])
        XCTAssertEqual(stopped.status, 1, stopped.stdout)
        XCTAssertEqual(try db.query("select count(*)::int from audit.key_handovers").scalar(Int.self), 2)
        try FileManager.default.removeItem(at: keys.appendingPathComponent("retired"))
        try FileManager.default.moveItem(at: home.appendingPathComponent("retired-aside"), to: keys.appendingPathComponent("retired"))
        let resumed = try permaudit(["audit", "rotate-key"])
        XCTAssertEqual(resumed.status, 0, resumed.stderr)
        XCTAssertTrue(resumed.stdout.hasPrefix("handed the chain over after seal 2 to key "), resumed.stdout)
        XCTAssertEqual(try db.query("select count(*)::int from audit.key_handovers").scalar(Int.self), 2, "no second handover")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keys.appendingPathComponent("next").path))
        let nothing = try permaudit(["audit", "rotate-key"])
        XCTAssertEqual(nothing.status, 0, nothing.stderr)
        XCTAssertTrue(nothing.stdout.contains("after seal 2 already: nothing to do"), nothing.stdout)
        try TestDatabase.append([EventFixtures.event(subject: "rot-c")], to: db)
        XCTAssertEqual(try permaudit(["audit", "seal"]).status, 0)
        let again = try permaudit(["audit", "verify"])
        XCTAssertEqual(again.status, 0, again.stdout + again.stderr)
        XCTAssertTrue(again.stdout.contains("seals valid: 3/3\nevents valid: 3/3\nkey handovers valid: 2/2\n"), again.stdout)
        let third = try permaudit(["audit", "rotate-key"])
        XCTAssertEqual(third.status, 0, third.stderr + " (the new key has sealed: it may hand over in turn)")
        XCTAssertEqual(try db.query("select count(*)::int from audit.key_handovers").scalar(Int.self), 3)
    }

    func testKeygenSealVerifyProveEraseAndTheAccessRecord() throws {
        let db = try Connection(url: url)
        try TestDatabase.append([EventFixtures.event(subject: "cli-a"), EventFixtures.event(subject: "cli-b"),
                                 EventFixtures.event(subject: "cli-secret-42", overrides: ["attributes": #"{"note":"CLI-secret-42"}"#])], to: db)
        XCTAssertEqual(try permaudit(["audit", "verify"]).status, 2, "no key yet: cannot verify")

        let keygen = try permaudit(["audit", "keygen"])
        XCTAssertEqual(keygen.status, 0, keygen.stderr)
        let privateKey = home.appendingPathComponent("keys/seal-ed25519.pem").path
        let mode = try FileManager.default.attributesOfItem(atPath: privateKey)[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o600)
        // The pair, and nothing half-written beside it.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: home.appendingPathComponent("keys").path).sorted(),
                       ["seal-ed25519.pem", "seal-ed25519.pub.pem"])
        XCTAssertEqual(try permaudit(["audit", "keygen"]).status, 1, "never overwrites a key")
        XCTAssertEqual(try permaudit(["audit", "verify"]).status, 2, "nothing sealed: cannot verify")

        let seal = try permaudit(["audit", "seal"])
        XCTAssertEqual(seal.status, 0, seal.stderr)
        XCTAssertTrue(seal.stdout.hasPrefix("sealed 3 events as seal 1"), seal.stdout)
        let verify = try permaudit(["audit", "verify"])
        XCTAssertEqual(verify.status, 0, verify.stdout + verify.stderr)
        XCTAssertTrue(verify.stdout.contains("seals valid: 1/1\nevents valid: 3/3"), verify.stdout)
        let backwards = try permaudit(["audit", "verify", "--from", "3", "--to", "1"])
        XCTAssertEqual(backwards.status, 64, backwards.stderr)
        XCTAssertTrue(backwards.stderr.contains("'--from' (3) is after '--to' (1)"), backwards.stderr)

        let id: String = try db.query("select event_id::text from audit.events where position = 2").scalar()
        let prove = try permaudit(["audit", "prove", id])
        XCTAssertEqual(prove.status, 0, prove.stderr)
        let proof = home.appendingPathComponent("proof.json").path
        try prove.stdout.write(toFile: proof, atomically: true, encoding: .utf8)
        // Offline: no database at all.
        let check = try CLITests.run(["audit", "check-proof", proof, "--public-key", home.appendingPathComponent("keys/seal-ed25519.pub.pem").path],
                                     url: "postgresql:///nowhere?host=/nonexistent", environment: ["PERMAUDIT_HOME": "/nonexistent"])
        XCTAssertEqual(check.status, 0, check.stderr)
        XCTAssertTrue(check.stdout.hasPrefix("valid: event \(id) at position 2"), check.stdout)

        let export = try permaudit(["audit", "subject", "--app", "com.example.app", "--subject", "cli-secret-42"])
        XCTAssertEqual(export.status, 0, export.stderr)
        XCTAssertTrue(export.stdout.contains("\"sealId\":1,\"event\":{"), export.stdout)
        // The id from standard input instead, out of the process list: the same export.
        XCTAssertEqual(try permaudit(["audit", "subject", "--app", "com.example.app", "--subject-stdin"], stdin: "cli-secret-42\n").stdout, export.stdout)
        XCTAssertEqual(try permaudit(["audit", "subject", "--app", "com.example.app", "--subject-stdin"], stdin: "").status, 64, "no id")
        XCTAssertEqual(try permaudit(["audit", "subject", "--app", "com.example.app", "--subject", "cli-secret-42", "--subject-stdin"],
                                     stdin: "cli-secret-42\n").status, 64, "the id twice")
        XCTAssertEqual(try permaudit(["audit", "erase", "--app", "com.example.app", "--subject", "cli-secret-42"]).status, 64, "needs a reason")
        for action in ["subject", "erase"] {
            let badApp = try permaudit(["audit", action, "--app", "bad app!", "--subject", "cli-secret-42"] + (action == "erase" ? ["--reason", "request 7"] : []))
            XCTAssertEqual(badApp.status, 64, badApp.stderr)
            XCTAssertTrue(badApp.stderr.contains("'--app' must be an app id"), badApp.stderr)
        }
        let reasonWithTheId = try permaudit(["audit", "erase", "--app", "com.example.app", "--subject", "cli-secret-42", "--reason", "erase cli-secret-42"])
        XCTAssertEqual(reasonWithTheId.status, 1)
        XCTAssertTrue(reasonWithTheId.stderr.contains("reason: must not contain the install id"), reasonWithTheId.stderr)
        XCTAssertEqual(reasonWithTheId.stderr.components(separatedBy: "cli-secret-42").count, 1, "the id is not repeated")
        let erase = try permaudit(["audit", "erase", "--app", "com.example.app", "--subject-stdin", "--reason", "request 7"], stdin: "cli-secret-42\n")
        XCTAssertEqual(erase.status, 0, erase.stderr)
        XCTAssertFalse(erase.stdout.contains("cli-secret-42"))
        XCTAssertTrue(erase.stderr.hasPrefix("warning: 1 of its events hold the install id in a field of their own"), erase.stderr)
        XCTAssertFalse(erase.stderr.lowercased().contains("cli-secret-42"))
        let again = try permaudit(["audit", "erase", "--app", "com.example.app", "--subject", "cli-secret-42", "--reason", "again"])
        XCTAssertEqual(again.status, 3, "nothing to erase")
        XCTAssertEqual(again.stderr, "nothing erased: no such install for app com.example.app (unknown, or erased already)\n")
        XCTAssertEqual(try permaudit(["audit", "verify"]).status, 0, "erasure leaves the seals intact")

        let record = try db.query("select command, details::text from audit.access_log order by access_id").decode((String, String).self)
        XCTAssertEqual(record.map(\.0), ["audit verify", "audit seal", "audit verify", "audit prove", "audit.subject_events", "audit.subject_events",
                                          "audit erase", "audit erase", "audit verify"])
        XCTAssertEqual(record[6].1, #"{"app": "com.example.app", "streamKey": "3", "eventsHoldingTheId": "1"}"#)
        XCTAssertEqual(record[7].1, #"{"app": "com.example.app", "streamKey": "none"}"#)
        XCTAssertFalse(record.contains { $0.1.contains("cli-secret-42") })

        // Tampering: exit 1 and the position.
        try db.execute("alter table audit.events disable trigger user; update audit.events set app_version = '0.0.1' where position = 3")
        let tampered = try permaudit(["audit", "verify"])
        XCTAssertEqual(tampered.status, 1)
        XCTAssertTrue(tampered.stdout.contains("FAIL seal 1: modified at position 3"), tampered.stdout)

        // The dashboard's verdict on the whole log: a range verified intact afterwards (its own
        // seal only) does not hide the tampering found before.
        try TestDatabase.append([EventFixtures.event(subject: "cli-c")], to: db)
        XCTAssertEqual(try permaudit(["audit", "seal"]).status, 0)
        XCTAssertEqual(try permaudit(["audit", "verify", "--from", "4", "--to", "4"]).status, 0)
        let status = try db.query("select last_verification, unsealed_events from analytics.compliance_status").decode((String, Int).self)
        XCTAssertEqual(status.map(\.0), ["tampered"])
        XCTAssertEqual(status.map(\.1), [0])

        // A role that cannot read the seals could not verify: exit 2, not 1 (tampered).
        let writer = try CLITests.run(["audit", "verify"], url: url + "&options=-c%20role%3Dpermaudit_writer", environment: ["PERMAUDIT_HOME": home.path])
        XCTAssertEqual(writer.status, 2, writer.stderr)
        XCTAssertTrue(writer.stderr.contains("permission denied"), writer.stderr)
        // A role that reads the log and the seals but may not record an access: the verdict stands.
        let reader = "seal_reader_" + UUID().uuidString.prefix(8).lowercased()
        try db.execute("create role \(reader); grant usage on schema audit to \(reader); grant select on audit.events, audit.seals, audit.key_handovers to \(reader)")
        defer { try? db.execute("drop owned by \(reader); drop role \(reader)") }
        let readOnly = try CLITests.run(["audit", "verify"], url: url + "&options=-c%20role%3D\(reader)", environment: ["PERMAUDIT_HOME": home.path])
        XCTAssertEqual(readOnly.status, 1, readOnly.stderr)
        XCTAssertTrue(readOnly.stdout.contains("FAIL seal 1: modified at position 3"), readOnly.stdout)
        XCTAssertTrue(readOnly.stderr.contains("the verification is not recorded in audit.access_log"), readOnly.stderr)
    }

    /// Seals follow the committed order: an event whose position was taken before the last
    /// sealed one and that committed after the seal is counted as unsealed.
    func testUnsealedEventsCountsALateCommitBelowTheLastSealedPosition() throws {
        XCTAssertEqual(try permaudit(["audit", "keygen"]).status, 0)
        let early = try Connection(url: url), late = try Connection(url: url), db = try Connection(url: url)
        try early.execute("begin; select pg_current_xact_id()")  // the older transaction id
        try late.execute("begin; select pg_current_xact_id()")
        try late.query("select * from audit.append_events($1::jsonb)", ["[\(EventFixtures.event(subject: "late"))]"])  // position 1
        try early.query("select * from audit.append_events($1::jsonb)", ["[\(EventFixtures.event(subject: "early"))]"])  // position 2
        try early.execute("commit")
        let seal = try permaudit(["audit", "seal"])  // seals (older id, 2); the newer transaction still runs
        XCTAssertTrue(seal.stdout.hasPrefix("sealed 1 events"), seal.stdout + seal.stderr)
        try late.execute("commit")
        let status = try db.query("select unsealed_positions, unsealed_events from analytics.compliance_status").decode((Int, Int).self)
        XCTAssertEqual(status.map(\.0), [0], "positions after the last sealed one: none")
        XCTAssertEqual(status.map(\.1), [1], "but position 1 is not sealed")
    }

    func testExpectSealFindsTheNewestSealsDeleted() throws {
        let db = try Connection(url: url)
        XCTAssertEqual(try permaudit(["audit", "keygen"]).status, 0)
        try TestDatabase.append([EventFixtures.event(subject: "expect-a")], to: db)
        XCTAssertEqual(try permaudit(["audit", "seal"]).status, 0)
        try TestDatabase.append([EventFixtures.event(subject: "expect-b")], to: db)
        let seal = try permaudit(["audit", "seal"])
        XCTAssertTrue(seal.stdout.hasPrefix("sealed 1 events as seal 2"), seal.stdout)
        let hash = try XCTUnwrap(seal.stdout.split(separator: " ").last).trimmingCharacters(in: .whitespacesAndNewlines)
        let stored: String = try db.query("select encode(seal_hash, 'hex') from audit.seals where seal_id = 2").scalar()
        XCTAssertEqual(hash, stored)

        let verify = try permaudit(["audit", "verify", "--expect-seal", hash])
        XCTAssertEqual(verify.status, 0, verify.stdout + verify.stderr)
        XCTAssertTrue(verify.stdout.contains("newest seal: 2, hash \(hash)\n"), verify.stdout)
        XCTAssertEqual(try permaudit(["audit", "verify", "--expect-seal", "abc"]).status, 64)

        // The newest seal deleted: the shorter chain is intact in itself, the expected hash is gone.
        try db.execute("alter table audit.seals disable trigger user; delete from audit.seals where seal_id = 2")
        XCTAssertEqual(try permaudit(["audit", "verify"]).status, 0)
        let tampered = try permaudit(["audit", "verify", "--expect-seal", hash])
        XCTAssertEqual(tampered.status, 1, tampered.stdout)
        XCTAssertTrue(tampered.stdout.contains("FAIL seal 1: missing seal: no seal has the expected hash \(hash.prefix(16))..."), tampered.stdout)
        XCTAssertTrue(tampered.stdout.hasSuffix("result: TAMPERED (1 failures)\n"), tampered.stdout)
        XCTAssertFalse(tampered.stdout.contains("newest seal"), "no hash to keep from a tampered chain")

        // Every seal deleted: tampered, not "could not verify".
        try db.execute("delete from audit.seals")
        XCTAssertEqual(try permaudit(["audit", "verify", "--expect-seal", hash]).status, 1)
        XCTAssertEqual(try permaudit(["audit", "verify"]).status, 2)
    }

    func testFollowSealsPeriodically() throws {
        XCTAssertEqual(try permaudit(["audit", "keygen"]).status, 0)
        let db = try Connection(url: url)
        try TestDatabase.append([EventFixtures.event(subject: "follow-a"), EventFixtures.event(subject: "follow-b")], to: db)
        /// `project --follow --seal-every 1`, its standard error in the pipe.
        func follow() throws -> (Process, Pipe) {
            let (process, stderr) = (Process(), Pipe())
            process.executableURL = CLITests.binary
            process.arguments = ["project", "--follow", "--seal-every", "1", "--poll", "1"]
            process.environment = ProcessInfo.processInfo.environment.merging(["DATABASE_URL": url, "PERMAUDIT_HOME": home.path]) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = stderr
            try process.run()
            return (process, stderr)
        }
        /// The value of `query` once it reaches `target` (or after 10 s).
        func wait(_ query: String, reaches target: Int) throws -> Int {
            var value = 0
            for _ in 0..<50 where value < target {
                Thread.sleep(forTimeInterval: 0.2)
                value = try db.query(query).scalar()
            }
            return value
        }
        func stop(_ follower: (Process, Pipe)) -> (Int32, String) {
            follower.0.terminate()
            follower.0.waitUntilExit()
            return (follower.0.terminationStatus, String(decoding: follower.1.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        }
        let sealedEvents = "select coalesce(sum(event_count), 0)::int from audit.seals"
        let first = try follow()
        XCTAssertEqual(try wait(sealedEvents, reaches: 2), 2)
        try TestDatabase.append([EventFixtures.event(subject: "follow-c")], to: db)
        XCTAssertEqual(try wait(sealedEvents, reaches: 3), 3, "the follower sealed the first events and then the new one")
        XCTAssertEqual(stop(first).0, 0)
        XCTAssertEqual(try permaudit(["audit", "verify"]).status, 0)

        // The key lost: keygen for this database refuses to make another, which could not
        // extend the chain, and writes nothing.
        try assertKeygenRefusedAfterTheKeysAreLost(in: home, lastSeal: 2) { try permaudit($0) }
        // Another key all the same (made without naming the database) may not extend the chain:
        // the follower says so, stops sealing and goes on projecting.
        let unchecked = try CLITests.run(["audit", "keygen"], url: "", environment: ["PERMAUDIT_HOME": home.path])
        XCTAssertEqual(unchecked.status, 0, unchecked.stderr)
        try TestDatabase.append([EventFixtures.event(subject: "follow-d")], to: db)
        let second = try follow()
        let projected = "select events_projected::int from projection.checkpoint where name = 'analytics'"
        XCTAssertEqual(try wait(projected, reaches: 4), 4)
        try TestDatabase.append([EventFixtures.event(subject: "follow-e")], to: db)
        XCTAssertEqual(try wait(projected, reaches: 5), 5, "projecting went on")
        let (status, log) = stop(second)
        XCTAssertEqual(status, 0, log)
        XCTAssertTrue(log.contains("not sealing any more: seal 2, the last of the chain, was signed by key"), log)
        XCTAssertEqual(try db.query("select count(*)::int from audit.seals").scalar(Int.self), 2)
    }
}
