import Compliance
import Crypto
import Foundation
import Postgres

/// `permaudit bench audit`: sealing and verifying a log of `events` events vs the physical
/// reference, a plain `sha256()` of the same canonical rows in SQL.
public struct AuditBenchmark {
    public var events: Int
    public var sqlDirectory: URL

    public init(events: Int, sqlDirectory: URL) {
        self.events = events
        self.sqlDirectory = sqlDirectory
    }

    public func run(_ context: BenchmarkContext) throws -> [BenchmarkRow] {
        let url = try context.freshDatabase("permaudit_bench_audit", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_audit") }
        let db = try Connection(url: url)
        context.log("loading \(events) events into the log")
        try SyntheticEvents.copy(events, into: db, seed: 7)

        context.log("plain sha256() in SQL")
        var hashed = 0
        let reference = try measure {
            hashed = try db.query("""
                select count(sha256(convert_to(\(EventHashes.canonicalSQL), 'UTF8')))::bigint from audit.events e
                """).scalar()
        }
        context.log("seal")
        let key = try SigningKey.generate()
        var sealed: [Seal] = []
        let seal = try measure { sealed = try Sealer(key: key).seal(db) }
        context.log("verify")
        var result: Verifier.Result?
        let verify = try measure { result = try Verifier(publicKey: try key.publicKey).verify(url: url) }
        guard let result, result.intact, result.eventsValid == events else { throw BenchmarkError("verification failed") }
        return [
            BenchmarkRow(name: "plain sha256(canonical row) in SQL (reference)", count: hashed, seconds: reference),
            BenchmarkRow(name: "permaudit audit seal", count: events, seconds: seal, note: "\(sealed.count) seals"),
            BenchmarkRow(name: "permaudit audit verify", count: result.eventsChecked, seconds: verify,
                         note: "\(result.sealsValid)/\(result.sealsChecked) seals valid"),
        ]
    }
}
