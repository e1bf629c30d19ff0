import Analytics
import Compliance
import Crypto
import EventLog
import Foundation
import Postgres

enum AuditCommand: Command {
    static let name = "audit"
    static let abstract = "Compliance: seal keys, seals, verification, inclusion proofs, subject export and erasure."
    static let usage = "permaudit audit keygen|seal|rotate-key|verify|prove|check-proof|subject|erase|permissions [options]"
    static let discussion = """
          keygen                      write an Ed25519 key pair to $PERMAUDIT_HOME/keys/ (or --key-dir);
                                      refused where the log is sealed already (only the chain's
                                      key may extend it, or hand it over with rotate-key): the
                                      database named, else, without --key-dir, the embedded
                                      cluster's if it exists
          seal [--key FILE]           seal every committed event no seal covers yet (signed, chained
                                      Merkle seals of at most --max-events events each)
          rotate-key                  change the seal key: the key in --key-dir (the chain's) signs
                                      a handover to a new pair after the last seal; the new pair
                                      takes its place (its private key destroyed, its public key
                                      to retired/) and seals from then on
          verify [--from P] [--to P] [--public-key FILE] [--expect-seal HASH]
                                      recompute the chain, signatures, key handovers and every
                                      sealed event's hash from the chain's first key (default: the
                                      key directory's; the chain must pass through its retired
                                      keys and end with its current key); exit 0 intact, 1
                                      tampered, 2 could not verify
          prove EVENT_ID              print the event's inclusion proof against its signed seal (JSON)
          check-proof FILE --public-key FILE
                                      verify a proof offline, without any database
          subject --app A --subject S|--subject-stdin [--format ndjson|json]
                                      export every event of one install, with positions and seals
          erase --app A --subject S|--subject-stdin --reason TEXT
                                      delete the link between the install id and its events; the
                                      events and the seals stay, the erasure is recorded; exit 0
                                      erased, 3 nothing to erase (unknown, or erased already), 1
                                      failed; a warning names how many events hold the id in
                                      another field (which the log keeps)
          permissions [--app A] [--format table|json]
                                      over-permission findings with severity, evidence and the
                                      platform guidance behind each

        Every command but keygen that reads the database records itself in audit.access_log (never
        an install id). Keys: the private key file is created with mode 0600; seal and verify find
        the pair in $PERMAUDIT_HOME/keys/ unless --key / --public-key say otherwise. See
        docs/compliance.md.
        """
    static let options = [
        ("--key <file>", "Private key for seal (default $PERMAUDIT_HOME/keys/seal-ed25519.pem)."),
        ("--public-key <file>", "verify: the chain's first public key (default: the key directory's first, else its current; given, the chain's end and retired keys are checked only with --key-dir); check-proof: the key that signed the proof's seal (required)."),
        ("--key-dir <dir>", "Where keygen writes the pair, rotate-key changes it, and seal and verify look (default $PERMAUDIT_HOME/keys)."),
        ("--max-events <n>", "seal: events per seal at most (default 100000)."),
        ("--from <position>", "verify: first position of the range."), ("--to <position>", "verify: last position of the range."),
        ("--expect-seal <hash>", "verify: a seal hash kept outside the database (printed by seal, and by verify when intact); tampered if no seal has it."),
        ("--app <app>", "subject, erase: the app; permissions: only this app (1-255 characters [A-Za-z0-9._-])."), ("--subject <id>", "subject, erase: the install id."),
        ("--subject-stdin", "subject, erase: read the install id from the first line of standard input instead (it stays out of the process list and the shell's history)."),
        ("--reason <text>", "erase: why (recorded for good; must not contain the install id)."), ("--format <format>", "subject: ndjson (default) or json; permissions: table (default) or json."),
        databaseOption,
    ]
    static let valueOptions: Set<String> = ["--key", "--public-key", "--key-dir", "--max-events", "--from", "--to", "--expect-seal", "--app", "--subject",
                                            "--reason", "--format", "--database-url"]

    /// The options each action takes; any other given is a usage error. --database-url goes with
    /// every action, as with every command (check-proof uses no database, keygen only to look for seals).
    static let optionsByAction: [String: Set<String>] = [
        "keygen": ["--key-dir", "--database-url"],
        "seal": ["--key", "--key-dir", "--max-events", "--database-url"],
        "rotate-key": ["--key-dir", "--database-url"],
        "verify": ["--public-key", "--key-dir", "--from", "--to", "--expect-seal", "--database-url"],
        "prove": ["--database-url"],
        "check-proof": ["--public-key", "--database-url"],
        "subject": ["--app", "--subject", "--subject-stdin", "--format", "--database-url"],
        "erase": ["--app", "--subject", "--subject-stdin", "--reason", "--database-url"],
        "permissions": ["--app", "--format", "--database-url"],
    ]

    /// What each action takes besides its options, for the usage error of a wrong count.
    static let argumentsByAction = [
        "keygen": "no arguments", "seal": "no arguments", "rotate-key": "no arguments", "verify": "no arguments", "subject": "no arguments (the install is --subject)",
        "erase": "no arguments (the install is --subject)", "permissions": "no arguments",
        "prove": "one EVENT_ID", "check-proof": "one proof FILE",
    ]

    static var keyDirectory: URL { EmbeddedCluster.fromEnvironment().home.appendingPathComponent("keys") }

    /// keygen's check: a database without the log's schema has nothing sealed; a role that may
    /// not read the seals cannot tell.
    static func refuseASealedLog(_ db: Connection, keys store: KeyStore) throws {
        guard try db.query("""
            select exists (select from pg_class c join pg_namespace n on n.oid = c.relnamespace
                            where n.nspname = 'audit' and c.relname = 'seals')
            """).scalar(Bool.self) else { return }
        guard try db.mayRead(["audit.seals"]) else {
            throw CommandFailure(message: "cannot tell whether the log is sealed already: this role may not read audit.seals "
                                 + "(name the owner's or an auditor's database URL, or none for a key kept apart from any database)")
        }
        if let head = try ChainHead.read(db) {
            let handover = head.handover.map { ", and handed the chain over to key \($0.toKeyFingerprint.prefix(16))..." } ?? ""
            throw CommandFailure(message: """
                the log is sealed already (seal \(head.id), the last, was signed by key \(head.keyFingerprint.prefix(16))...\(handover)): \
                a new key could not extend the chain; restore the chain's key pair from its backup into \(store.directory.path) \
                ('permaudit audit rotate-key' then changes it; docs/compliance.md, Keys)
                """)
        }
    }

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        guard let action = arguments.positionals.first else { throw UsageError(message: "expected an audit action", usage: usage) }
        let rest = Array(arguments.positionals.dropFirst())
        if let options = optionsByAction[action] { try arguments.refuse(allBut: options, for: "audit \(action)") }
        let store = KeyStore(directory: arguments.value("--key-dir").map { URL(fileURLWithPath: $0) } ?? keyDirectory)
        func publicKey() throws -> VerifyingKey {
            try KeyStore.verifyingKey(at: arguments.value("--public-key").map { URL(fileURLWithPath: $0) } ?? store.publicKeyURL)
        }
        do {
            switch (action, rest.count) {
            case ("keygen", 0):
                // A sealed log is refused before any key is made: only the key that signed the
                // chain may extend it (a new key on a host whose key volume was lost would leave
                // the projector unable to seal). The log is the database named, else, for the
                // default key directory, the embedded cluster's where it exists.
                let embeddedKeys = arguments.value("--key-dir") == nil && (try? EmbeddedCluster.fromEnvironment().status()) != .notCreated
                if databaseIsNamed(arguments) || embeddedKeys, !FileManager.default.fileExists(atPath: store.privateKeyURL.path) {
                    try refuseASealedLog(try connectDatabase(arguments).connection, keys: store)
                }
                let key = try store.generate()
                print("wrote \(store.privateKeyURL.path) (mode 0600) and \(store.publicKeyURL.path)")
                print("key fingerprint: \(key.fingerprint)")
                return 0
            case ("seal", 0):
                let key = try KeyStore.signingKey(at: arguments.value("--key").map { URL(fileURLWithPath: $0) } ?? store.privateKeyURL)
                var sealer = Sealer(key: key)
                sealer.maxEventsPerSeal = try arguments.int("--max-events", default: 100_000, range: 1...10_000_000)
                let db = try openDatabase(arguments)
                // Each seal's line as it commits: its hash is what to keep for --expect-seal, also
                // when a later seal fails.
                let seals = try sealer.seal(db) { seal in
                    print("sealed \(seal.eventCount) events as seal \(seal.id) (after \(seal.after.sealNotation) through \(seal.through.sealNotation)), root \(Hex.encode(seal.merkleRoot)), seal hash \(Hex.encode(seal.sealHash))")
                    fflush(nil)  // every stream: the line is out before the next seal begins
                }
                try SubjectRights.recordAccess(db, command: "audit seal", details: ["seals": "\(seals.count)"])
                if seals.isEmpty { print("nothing to seal: every event committed before the oldest running transaction is sealed") }
                return 0
            case ("rotate-key", 0):
                let db = try openDatabase(arguments)
                guard let head = try ChainHead.read(db) else {
                    throw CommandFailure(message: "nothing is sealed yet: there is no chain to hand over (the pair in \(store.directory.path) may simply be replaced)")
                }
                // The next pair of a rotation that stopped half-way is used again; once the
                // handover to it is stored, only the files are left to move.
                let pending = FileManager.default.fileExists(atPath: store.next.privateKeyURL.path)
                    ? try KeyStore.signingKey(at: store.next.privateKeyURL).publicKey : nil
                let current = try KeyStore.signingKey(at: store.privateKeyURL)
                let currentKey = try current.publicKey
                if pending == nil, head.handover?.toKeyFingerprint == currentKey.fingerprint {
                    try SubjectRights.recordAccess(db, command: "audit rotate-key", details: ["after_seal": "\(head.id)", "result": "nothing to do"])
                    print("the chain was handed over to this key (\(currentKey.fingerprint)) after seal \(head.id) already: nothing to do")
                    return 0
                }
                if pending == nil || head.nextKeyFingerprint(as: currentKey) != pending?.fingerprint {
                    // verify's default trust once the current key is another: the chain's first key.
                    if head.firstKeyFingerprint == currentKey.fingerprint { try store.keepFirstKey(currentKey) }
                    try Sealer(key: current).handOver(on: db) { try pending ?? store.next.generate() }
                }
                try store.promoteNext()
                let key = try KeyStore.verifyingKey(at: store.publicKeyURL)
                try SubjectRights.recordAccess(db, command: "audit rotate-key", details: ["after_seal": "\(head.id)"])
                print("handed the chain over after seal \(head.id) to key \(key.fingerprint)")
                print("\(store.privateKeyURL.path) seals from now on; the old private key is destroyed, its public key is in \(store.retiredDirectory.path)")
                if !FileManager.default.fileExists(atPath: store.firstPublicKeyURL.path) {
                    printError("note: the chain's first key (\(head.firstKeyFingerprint.prefix(16))...) is not in \(store.directory.path): give it to 'audit verify --public-key'")
                }
                return 0
            case ("verify", 0):
                // Trusted: the chain's first key (given, or the key directory's), which the chain
                // must lead from; and the key directory's keys (without --public-key, or with
                // --key-dir), which it must lead through (the retired ones) and to (the current).
                let first: VerifyingKey, current: VerifyingKey?, retired: [VerifyingKey]
                do {
                    let directoryKeys = arguments.value("--public-key") == nil || arguments.value("--key-dir") != nil
                    current = directoryKeys ? try KeyStore.verifyingKey(at: store.publicKeyURL) : nil
                    retired = directoryKeys ? store.retiredKeys() : []
                    first = arguments.value("--public-key") == nil && FileManager.default.fileExists(atPath: store.firstPublicKeyURL.path)
                        ? try KeyStore.verifyingKey(at: store.firstPublicKeyURL) : try publicKey()
                } catch { printError("Error: \(error)"); return 2 }
                let from = try arguments.int("--from", default: 1, range: 1...Int.max)
                let to = try arguments.int("--to", default: Int.max, range: 1...Int.max)
                guard from <= to else { throw UsageError(message: "'--from' (\(from)) is after '--to' (\(to))", usage: usage) }
                let range = arguments.value("--from") == nil && arguments.value("--to") == nil ? nil : Int64(from)...Int64(to)
                let expected = try arguments.value("--expect-seal").map { hex in
                    guard hex.count == 64, let hash = Hex.decode(hex) else {
                        throw UsageError(message: "'--expect-seal' must be a seal hash of 64 hex digits", usage: usage)
                    }
                    return hash
                }
                // Exit 1 means tampered: a database that cannot be reached or read is exit 2.
                let db: Postgres.Connection
                let result: Verifier.Result
                do {
                    let url: String
                    (db, url) = try openDatabaseAndURL(arguments)
                    result = try Verifier(publicKey: first, currentKey: current, retiredKeys: retired)
                        .verify(url: url, positions: range, expectedSeal: expected)
                } catch { printError("Error: \(error)"); return 2 }
                print(result.lines.joined(separator: "\n"))
                do {
                    try SubjectRights.recordAccess(db, command: "audit verify", details: [
                        "range": range.map { "\($0.lowerBound)-\($0.upperBound)" } ?? "all",
                        "result": result.verdict,
                        "failures": "\(result.failures.count)",
                    ])
                } catch {
                    // The verdict stands (tampered stays 1); an intact log whose check left no
                    // record did not complete.
                    printError("Error: the verification is not recorded in audit.access_log (\(error))")
                    if result.intact { return 2 }
                }
                if result.sealsChecked == 0 && result.intact { printError("Error: no seal to verify against (run 'permaudit audit seal')"); return 2 }
                return result.intact ? 0 : 1
            case ("prove", 1):
                guard let id = UUID(uuidString: rest[0]) else { throw UsageError(message: "EVENT_ID must be a UUID", usage: usage) }
                let db = try openDatabase(arguments)
                let proof = try InclusionProof.make(db, eventId: id)
                try SubjectRights.recordAccess(db, command: "audit prove", details: ["event": id.uuidString.lowercased()])
                print(proof.json, terminator: "")
                return 0
            case ("check-proof", 1):
                guard arguments.value("--public-key") != nil else { throw UsageError(message: "check-proof needs --public-key", usage: usage) }
                guard let text = try? String(contentsOfFile: rest[0], encoding: .utf8) else { throw CommandFailure(message: "\(rest[0]): cannot read") }
                let proof = try InclusionProof(json: text)
                try proof.check(publicKey: try publicKey())
                print("valid: event \(proof.eventId.uuidString.lowercased()) at position \(proof.position) is leaf \(proof.leafIndex) of seal \(proof.seal.id) (\(proof.seal.eventCount) events), signed by key \(proof.seal.keyFingerprint)")
                return 0
            case ("subject", 0):
                let (app, subject) = try install(arguments)
                let format = arguments.value("--format") ?? "ndjson"
                guard format == "ndjson" || format == "json" else { throw UsageError(message: "'--format' must be ndjson or json", usage: usage) }
                let db = try openDatabase(arguments)
                let events = try SubjectRights.export(db, app: app, subject: subject)
                let lines = SubjectRights.ndjson(events)
                print(format == "ndjson" ? lines : "[" + lines.split(separator: "\n").joined(separator: ",") + "]\n", terminator: "")
                if events.isEmpty { printError("no events for this install (unknown, or erased)") }
                return 0
            case ("erase", 0):
                let (app, subject) = try install(arguments)
                guard let reason = arguments.value("--reason"), !reason.trimmingCharacters(in: .whitespaces).isEmpty else {
                    throw UsageError(message: "erase needs --reason", usage: usage)
                }
                let db = try openDatabase(arguments)
                let erasure = try db.transaction { () -> SubjectRights.Erasure? in
                    let erasure = try SubjectRights.erase(db, app: app, subject: subject, reason: reason)
                    var details = ["app": app, "streamKey": erasure.map { String($0.streamKey) } ?? "none"]
                    if let erasure { details["eventsHoldingTheId"] = String(erasure.eventsHoldingTheId) }
                    try SubjectRights.recordAccess(db, command: "audit erase", details: details)
                    return erasure
                }
                guard let erasure else {
                    // Nothing to do: a retried request can tell this from a failure (exit 1).
                    printError("nothing erased: no such install for app \(app) (unknown, or erased already)")
                    return 3
                }
                print("erased: the install's link to stream \(erasure.streamKey) is deleted; its events stay in the log, unlinked, and the seals still verify")
                if erasure.eventsHoldingTheId > 0 {
                    printError("warning: \(erasure.eventsHoldingTheId) of its events hold the install id in a field of their own (flow, experiments or attributes), which the log keeps for good (docs/compliance.md)")
                }
                return 0
            case ("permissions", 0):
                let format = arguments.value("--format") ?? "table"
                guard format == "table" || format == "json" else { throw UsageError(message: "'--format' must be table or json", usage: usage) }
                let db = try openDatabase(arguments)
                let findings = try Findings.all(db, app: try arguments.app())
                try SubjectRights.recordAccess(db, command: "audit permissions", details: ["app": arguments.value("--app") ?? "all",
                                                                                           "findings": "\(findings.count)"])
                print(format == "json" ? Findings.json(findings) : findingsTable(findings).text, terminator: "")
                return 0
            default:
                // The arguments are not echoed: an install id given in place of --subject would
                // land on stderr.
                guard let wanted = argumentsByAction[action] else {
                    throw UsageError(message: "unknown audit action '\(action)'", usage: usage)
                }
                throw UsageError(message: "'audit \(action)' takes \(wanted), got \(rest.count) argument\(rest.count == 1 ? "" : "s")", usage: usage)
            }
        } catch let error as ComplianceError {
            throw CommandFailure(message: error.description)
        } catch let error as CryptoError {
            throw CommandFailure(message: error.description)
        }
    }

    static func findingsTable(_ findings: [Finding]) -> ResultTable {
        var table = ResultTable(title: "Over-permission findings", columns: ["severity", "rule", "app", "platform", "subject", "count", "evidence"])
        table.rows = findings.map { [.text($0.severity.rawValue), .text($0.rule), .text($0.app), .text($0.platform), .text($0.subject),
                                     .integer($0.count), .text($0.evidence)] }
        return table
    }

    static func install(_ arguments: ParsedArguments) throws -> (String, String) {
        let app = try arguments.app()
        switch (app, arguments.value("--subject"), arguments.has("--subject-stdin")) {
        case let (app?, subject?, false):
            return (app, subject)
        case let (app?, nil, true):
            // A UTF-8 byte order mark before the id (an editor's) is not part of it.
            guard let read = readLine(strippingNewline: true), case let line = read.hasPrefix("\u{FEFF}") ? String(read.dropFirst()) : read,
                  !line.isEmpty else {
                throw UsageError(message: "--subject-stdin: standard input has no install id on its first line", usage: usage)
            }
            return (app, line)
        case (_?, _?, true):
            throw UsageError(message: "give the install id once: --subject or --subject-stdin", usage: usage)
        default:
            throw UsageError(message: "--app and --subject (or --subject-stdin) are required", usage: usage)
        }
    }
}
