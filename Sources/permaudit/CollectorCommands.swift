import Collector
import EventLog
import Foundation
import MicroHTTP
import Postgres

enum ServeCommand: Command {
    static let name = "serve"
    static let abstract = "Run the HTTP collector: apps post events with their API key (docs/collector.md)."
    static let usage = "permaudit serve [--listen <host:port>] [--threads <n>] [--connections <n>] [--rate-limit <n>] [--burst <n>] [--timeout <s>] [--database-url <url>]"
    static let discussion = """
        POST /v1/events takes a JSON array of 1-500 events (Content-Type: application/json, optionally
        Content-Encoding: gzip, at most 1 MiB after decompression) with 'Authorization: Bearer KEY'
        (see 'permaudit keys') and answers one result per event; GET /healthz, /readyz and /metrics
        (Prometheus). Concurrent requests share one transaction (group commit); each is answered
        after its events are committed. Runs until SIGINT or SIGTERM. The API is in
        docs/collector.md and docs/collector.openapi.yaml.
        """
    static let options = [
        ("--listen <host:port>", "IPv4 address and port to listen on (default 127.0.0.1:8080)."),
        ("--threads <n>", "HTTP server threads (default 4)."),
        ("--connections <n>", "Database connections, one group-commit writer each (default 4)."),
        ("--rate-limit <n>", "Requests per second per API key, 0 for none (default 100)."),
        ("--burst <n>", "Requests a key may send at once above the rate (default 200)."),
        ("--timeout <s>", "Seconds before an idle or stalled connection is closed (default 10)."),
        databaseOption,
    ]
    static let valueOptions: Set<String> = ["--listen", "--threads", "--connections", "--rate-limit", "--burst", "--timeout", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        let listen = arguments.value("--listen") ?? "127.0.0.1:8080"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw UsageError(message: "'--listen' must be HOST:PORT, got '\(listen)'", usage: usage)
        }
        guard HTTPServer.ipv4Address(String(listen[..<colon])) != nil else {
            throw UsageError(message: "'--listen' must name an IPv4 address or localhost (the collector listens on IPv4 only), got '\(listen[..<colon])'", usage: usage)
        }
        let url = try openDatabaseAndURL(arguments).url  // migrates the embedded cluster, or checks an external database
        let migrations = try Migrator(directory: try Migrator.locateDirectory()).migrations
        var configuration = CollectorConfiguration(databaseURL: url,
                                                   requiredMigrations: Set(migrations.map(\.version)))
        configuration.host = String(listen[..<colon])
        configuration.port = port
        configuration.threads = try arguments.int("--threads", default: 4, range: 1...256)
        configuration.databaseConnections = try arguments.int("--connections", default: 4, range: 1...256)
        configuration.rateLimit = Double(try arguments.int("--rate-limit", default: 100, range: 0...1_000_000))
        configuration.burst = Double(try arguments.int("--burst", default: 200, range: 1...1_000_000))
        configuration.connectionTimeout = try arguments.int("--timeout", default: 10, range: 1...3600)
        configuration.log = { printError($0) }

        // Block the stop signals in every thread; the main thread waits for them below.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        let collector: Collector
        do {
            collector = try Collector(configuration)
        } catch {
            throw CommandFailure(message: "\(error)")
        }
        printError("permaudit serve: listening on http://\(configuration.host):\(collector.port)")
        var received: Int32 = 0
        sigwait(&signals, &received)
        printError("permaudit serve: stopping (answering requests in flight)")
        collector.stop()
        return 0
    }
}

enum KeysCommand: Command {
    static let name = "keys"
    static let abstract = "Manage the collector's API keys (create, list, revoke)."
    static let usage = "permaudit keys create --app <app> | list | revoke <id> [--database-url <url>]"
    static let discussion = """
          create --app APP   a new key that may write APP's events; printed once (only its SHA-256 is stored)
          list               id, app, created and revoked times of every key (never the keys)
          revoke ID          the key no longer authenticates (within 10 s on a running collector)

        Run as the login that migrates the database (a superuser or a member of permaudit_owner);
        the collector's permaudit_writer login only verifies keys.
        """
    static let options = [("--app <app>", "The app (bundle id / package name) a new key writes for."), databaseOption]
    static let valueOptions: Set<String> = ["--app", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        guard let action = arguments.positionals.first else {
            throw UsageError(message: "expected one of create, list, revoke", usage: usage)
        }
        if action == "list" || action == "revoke" { try arguments.refuse(allBut: ["--database-url"], for: "keys \(action)") }
        switch action {
        case "create":
            guard arguments.positionals.count == 1 else { throw UsageError(message: "unexpected argument '\(arguments.positionals[1])'", usage: usage) }
            guard let app = try arguments.app() else { throw UsageError(message: "'keys create' needs --app", usage: usage) }
            let created = try APIKeys.create(app: app, on: try openDatabase(arguments))
            print(created.key)
            printError("key \(created.id) for \(app); it is shown only now: store it in the app's configuration")
        case "list":
            try arguments.noPositionalsAfterAction()
            let keys = try APIKeys.list(on: try openDatabase(arguments))
            let format = ISO8601DateFormatter()
            print("id\tapp\tcreated\trevoked")
            for key in keys {
                print("\(key.id)\t\(key.app)\t\(format.string(from: key.createdAt))\t\(key.revokedAt.map { format.string(from: $0) } ?? "-")")
            }
        case "revoke":
            guard arguments.positionals.count == 2 else {
                throw UsageError(message: "'keys revoke' needs one key id (see 'permaudit keys list')", usage: usage)
            }
            guard let id = Int64(arguments.positionals[1]), id > 0 else {
                throw UsageError(message: "'keys revoke': the key id must be a positive integer (see 'permaudit keys list')", usage: usage)
            }
            guard try APIKeys.revoke(id: id, on: try openDatabase(arguments)) else {
                throw CommandFailure(message: "no active key with id \(id)")
            }
            print("revoked key \(id)")
        default:
            throw UsageError(message: "unknown action '\(action)'; expected create, list or revoke", usage: usage)
        }
        return 0
    }
}

private extension ParsedArguments {
    func noPositionalsAfterAction() throws {
        if positionals.count > 1 { throw UsageError(message: "unexpected argument '\(positionals[1])'", usage: usage) }
    }
}
