import EventLog
import Foundation
import Postgres
import Projections

/// `permaudit bench project`: the projector from an empty projection (the one-pass build, and
/// batches only) vs a plain COPY of the same rows out of the log, the projector's memory, and the
/// three headline questions answered from the views vs from ad-hoc SQL over the raw log, in one
/// run on one server.
///
/// The log is filled by COPY straight into audit.events (the write path's own speed is what
/// `bench ingest` measures); the rows are the same wire-format events `bench ingest` generates.
public struct ProjectionBenchmark {
    public var events: Int
    public var sqlDirectory: URL
    public var batchSize: Int

    public init(events: Int, sqlDirectory: URL, batchSize: Int = Projector.defaultBatchSize) {
        self.events = events
        self.sqlDirectory = sqlDirectory
        self.batchSize = batchSize
    }

    static let headlineFromViews = [
        ("denial rate by platform and OS major", """
            select platform, os_major, sum(denied)::float8 / nullif(sum(prompted), 0)
              from analytics.permission_outcomes_daily group by 1, 2
            """),
        ("primed vs unprimed access rate", """
            select arm, sum(granted + limited)::float8 / nullif(sum(attempts), 0)
              from analytics.priming_arms group by 1
            """),
        ("picker adoption by flow", """
            select flow, sum(picker_attempts)::float8 / nullif(sum(picker_attempts + permission_attempts), 0)
              from analytics.picker_adoption_daily group by 1
            """),
    ]

    static let headlineFromLog = [
        ("denial rate by platform and OS major", """
            with a as (
                select app, attempt,
                       (array_agg(platform order by occurred_at, position))[1] as platform,
                       (array_agg(os_major order by occurred_at, position))[1] as os_major,
                       bool_or(type = 'permission.prompted' and coalesce((payload->'attributes'->>'dialogShown')::boolean, true)) as prompted,
                       (array_agg(type order by occurred_at desc, position desc) filter (where type in
                           ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')))[1] as outcome
                  from audit.events where attempt is not null group by app, attempt)
            select platform, os_major, (count(*) filter (where outcome = 'permission.denied'))::float8 / nullif(count(*), 0)
              from a where prompted group by 1, 2
            """),
        ("primed vs unprimed access rate", """
            with a as (
                select app, attempt, bool_or(type = 'prePermission.shown') as primed,
                       bool_or(type in ('permission.prompted', 'prePermission.shown')) as permission_attempt,
                       (array_agg(type order by occurred_at desc, position desc) filter (where type in
                           ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')))[1] as outcome
                  from audit.events where attempt is not null group by app, attempt)
            select primed, (count(*) filter (where outcome in ('permission.granted', 'permission.limited')))::float8 / count(*)
              from a where permission_attempt group by 1
            """),
        ("picker adoption by flow", """
            with a as (
                select app, attempt,
                       (array_agg(flow order by occurred_at, position) filter (where flow is not null))[1] as flow,
                       bool_or(type in ('permission.prompted', 'prePermission.shown')) as permission_attempt,
                       bool_or(type = 'picker.opened') as picker
                  from audit.events where attempt is not null group by app, attempt)
            select flow, (count(*) filter (where picker and not permission_attempt))::float8
                         / nullif(count(*) filter (where picker and not permission_attempt) + count(*) filter (where permission_attempt), 0)
              from a group by 1
            """),
    ]

    public struct Result: Sendable {
        public var rows: [BenchmarkRow]
        public var headline: [(question: String, views: Double, log: Double)]
        /// This process's resident memory before the projector ran, and its peak while it ran.
        public var clientBeforeMiB: Double
        public var clientPeakMiB: Double
        /// The projector's server backends (two during a one-pass build): peak private memory
        /// (RssAnon, summed) while it ran.
        public var serverPeakMiB: Double?
    }

    public func run(_ context: BenchmarkContext) throws -> Result {
        let url = try context.freshDatabase("permaudit_bench_project", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_project") }
        context.log("loading \(events) events into the log")
        try SyntheticEvents.copy(events, into: try Connection(url: url), seed: 7)  // ends with VACUUM ANALYZE
        // The same log in two more databases, so that the three ways of projecting it start alike;
        // the copies' writes are flushed before anything is timed.
        let oneConnectionURL = try context.copyDatabase("permaudit_bench_project", as: "permaudit_bench_project_single")
        defer { context.dropDatabase("permaudit_bench_project_single") }
        let batchesURL = try context.copyDatabase("permaudit_bench_project", as: "permaudit_bench_project_batches")
        defer { context.dropDatabase("permaudit_bench_project_batches") }
        let db = try Connection(url: url)
        try db.execute("checkpoint")

        context.log("plain COPY out of the log")
        let plainRead = """
            copy (select position, transaction_id, stream_key, type, occurred_at, app, platform, os_major, app_version, attempt,
                         permission, flow, payload->'experiments', payload->'attributes'
                    from audit.events order by transaction_id, position) to stdout
            """
        var bytes = 0
        var copied = 0
        let copySeconds = try measure { copied = try db.copyOut(plainRead) { bytes += $0.count } }
        // The same read of the copies, untimed, so that every projector run starts from a log just read.
        for copy in [oneConnectionURL, batchesURL] { _ = try Connection(url: copy).copyOut(plainRead) { _ in } }

        // The projector over the same log in three databases, from an empty projection: the
        // one-pass build a first run or a rebuild does, on two connections (as `project` runs it)
        // and on one (`projection.build_from_log`), and batches only (as with --batch-size).
        // Memory sampled while each runs: this process, and the backends' private memory.
        let clientBefore = currentResidentMiB()
        enum Way { case twoConnections, oneConnection, batches }
        func catchUp(_ url: String, _ way: Way) throws -> (progress: Projector.Progress, seconds: Double,
                                                          memory: (clientMiB: Double, serverPrivateMiB: Double?)) {
            let projector = Projector(connection: try Connection(url: url))
            projector.batchSize = batchSize
            projector.buildsEmptyProjectionInOnePass = way != .batches
            // The one-pass build's second connection, as `project` opens it; its backend is sampled too.
            let backends = ServerBackends([projector.connection.backendPID])
            if way == .twoConnections {
                projector.openBuildHelper = {
                    let helper = try Connection(url: url)
                    backends.add(helper.backendPID)
                    return helper
                }
            }
            var progress = Projector.Progress()
            var seconds = 0.0
            let memory = try peakMemory(serverBackends: backends) {
                seconds = try measure { progress = try projector.catchUp() }
            }
            guard progress.events == events else { throw BenchmarkError("projected \(progress.events) of \(events) events") }
            return (progress, seconds, memory)
        }
        context.log("projector: one-pass build of the empty projection, two connections")
        let twoConnections = try catchUp(url, .twoConnections)
        context.log("projector: one-pass build of the empty projection, one connection")
        let oneConnection = try catchUp(oneConnectionURL, .oneConnection)
        context.log("projector: catch-up in batches from the start")
        let batches = try catchUp(batchesURL, .batches)
        let runs = [twoConnections, oneConnection, batches]
        let serverPeak = runs.compactMap { $0.memory.serverPrivateMiB }.max()
        try db.execute("analyze")

        context.log("headline questions")
        var headline: [(String, Double, Double)] = []
        for (index, (question, viewSQL)) in Self.headlineFromViews.enumerated() {
            let fromViews = try Self.median { _ = try db.query(viewSQL) }
            let fromLog = try Self.median(runs: 1) { _ = try db.query(Self.headlineFromLog[index].1) }
            headline.append((question, fromViews, fromLog))
        }
        return Result(
            rows: [
                BenchmarkRow(name: "plain COPY (SELECT ... FROM audit.events) TO STDOUT (reference)", count: copied, seconds: copySeconds,
                             note: "\(bytes / 1_048_576) MiB"),
                BenchmarkRow(name: "projector, empty projection: one-pass build on two connections (as `project`)", count: twoConnections.progress.events,
                             seconds: twoConnections.seconds,
                             note: "\(twoConnections.progress.attempts) attempts" + Self.backendNote(twoConnections.memory.serverPrivateMiB)),
                BenchmarkRow(name: "projector, empty projection: one-pass build on one connection (projection.build_from_log)",
                             count: oneConnection.progress.events, seconds: oneConnection.seconds,
                             note: "\(oneConnection.progress.attempts) attempts" + Self.backendNote(oneConnection.memory.serverPrivateMiB)),
                BenchmarkRow(name: "projector catch-up in batches (projection.apply_batch, \(batchSize) per batch)", count: batches.progress.events,
                             seconds: batches.seconds, note: "\(batches.progress.batches) batches, \(batches.progress.attempts) attempt updates"
                                 + Self.backendNote(batches.memory.serverPrivateMiB)),
            ],
            headline: headline, clientBeforeMiB: clientBefore,
            clientPeakMiB: runs.map(\.memory.clientMiB).max() ?? 0, serverPeakMiB: serverPeak
        )
    }

    static func backendNote(_ privateMiB: Double?) -> String {
        privateMiB.map { String(format: "; server backends peak %.0f MiB private", $0) } ?? ""
    }

    static func median(runs: Int = 5, _ body: () throws -> Void) throws -> Double {
        var times: [Double] = []
        for _ in 0..<runs { times.append(try measure(body)) }
        return times.sorted()[times.count / 2]
    }
}
