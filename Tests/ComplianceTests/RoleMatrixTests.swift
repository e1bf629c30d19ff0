import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// Each role against each operation, as the role itself (SET ROLE): allowed ones work,
/// forbidden ones fail.
final class RoleMatrixTests: XCTestCase {
    static let roles = ["permaudit_writer", "permaudit_projector", "permaudit_analyst", "permaudit_auditor"]

    func testRoleByOperation() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        try EventLog(connection: db).append([EventFixtures.event(subject: "matrix-1")])
        let event = "'" + EventFixtures.event(subject: "matrix-2").replacingOccurrences(of: "'", with: "''") + "'"
        let operations: [(String, String, Set<String>)] = [
            ("append through the write path", "select * from audit.append_events(('[' || \(event) || ']')::jsonb)", ["permaudit_writer"]),
            ("record rejected events", "select audit.record_rejected(current_date, 'a', 'ios', 1)", ["permaudit_writer"]),
            ("read a stream's version", "select audit.stream_version('com.example.app', 'matrix-1')", ["permaudit_writer"]),
            ("insert into the log directly", "insert into audit.events (event_id, stream_key, stream_version, type, occurred_at, app, platform, os_major, app_version, payload) values (gen_random_uuid(), 1, 99, 'x', now(), 'a', 'ios', 1, '1', '{}')", []),
            ("insert into the link table", "insert into audit.subject_streams (app, subject) values ('a', 'b')", []),
            ("read the log", "select count(*) from audit.events", ["permaudit_projector", "permaudit_auditor"]),
            ("read the log in committed order", "select count(*) from audit.read_committed('0'::xid8, 0, 10)", ["permaudit_projector", "permaudit_auditor"]),
            ("read the link table", "select count(*) from audit.subject_streams", []),
            ("update the log", "update audit.events set app = app", []),
            ("delete from the log", "delete from audit.events", []),
            ("truncate the log", "truncate audit.events", []),
            ("run a projection batch", "select * from projection.apply_batch(10)", ["permaudit_projector"]),
            ("build an empty projection in one pass", "select * from projection.build_from_log()", ["permaudit_projector"]),
            ("take a one-pass build's horizon", "select projection.build_horizon()", ["permaudit_projector"]),
            ("stage the install tables of a build", "select projection.stage_install_tables(pg_snapshot_xmin(pg_current_snapshot()))", ["permaudit_projector"]),
            ("build the attempts of a build", "select projection.build_attempts(pg_snapshot_xmin(pg_current_snapshot()))", ["permaudit_projector"]),
            ("build on two connections, function by function", """
                do $$ declare h xid8 := projection.build_horizon(); begin
                    perform projection.stage_install_tables(h); perform projection.build_attempts(h); perform projection.finish_build(h);
                end $$
                """, ["permaudit_projector"]),
            ("read the build's staging tables", "select count(*) from projection.staged_permission_state", []),
            ("check a build horizon", "select projection.check_build_horizon('1', false)", []),
            ("write projection tables", "delete from projection.outcomes_daily", []),
            ("read projection state", "select count(*) from projection.attempts", ["permaudit_auditor"]),
            ("read the analytics views", "select count(*) from analytics.permission_outcomes_daily", ["permaudit_analyst", "permaudit_auditor"]),
            // Install ids: only the analyst, who reads no log; the auditor gets them through access requests.
            ("read install ids in the states", "select count(*) from analytics.permission_state", ["permaudit_analyst"]),
            ("count installs per state", "select count(*) from analytics.permission_state_counts", ["permaudit_analyst", "permaudit_auditor"]),
            ("read the states of installs not erased", "select count(*) from projection.linked_permission_state", ["permaudit_auditor"]),
            ("read the seals", "select count(*) from audit.seals", ["permaudit_projector", "permaudit_auditor"]),
            ("change a seal", "delete from audit.seals", []),
            ("read the key handovers", "select count(*) from audit.key_handovers", ["permaudit_projector", "permaudit_auditor"]),
            ("change a key handover", "delete from audit.key_handovers", []),
            ("read the access record", "select count(*) from audit.access_log", ["permaudit_auditor"]),
            ("record a seal's access", "select audit.record_access('audit seal', '{}')", ["permaudit_projector", "permaudit_auditor"]),
            // The last verification shows on the compliance dashboard: the projector cannot write one (035).
            ("record a verification", "select audit.record_access('audit verify', '{\"result\": \"intact\"}')", ["permaudit_auditor"]),
            ("export an install", "select count(*) from audit.subject_events('com.example.app', 'matrix-1')", ["permaudit_auditor"]),
            ("erase an install", "select audit.erase_subject('com.example.app', 'nobody', 'test')", ["permaudit_auditor"]),
            ("rewrite the erasure record", "update audit.erasures set reason = 'x'", []),
            ("verify a collector key", "select collector.verify_key('no-such-key')", ["permaudit_writer"]),
            ("read the collector's key hashes", "select count(*) from collector.api_keys", []),
            ("create a collector key", "select * from collector.create_key('com.example.app')", []),
            ("see which migrations are applied", "select count(*) from permaudit.schema_migrations", ["permaudit_writer", "permaudit_projector", "permaudit_auditor"]),
        ]
        var wrong: [String] = []
        for role in Self.roles {
            for (name, sql, allowed) in operations {
                try db.execute("begin")
                try db.execute("set local role \(role)")
                let worked: Bool
                do { _ = try db.query(sql); worked = true } catch { worked = false }
                try db.execute("rollback")
                if worked != allowed.contains(role) { wrong.append("\(role) \(worked ? "could" : "could not") \(name)") }
            }
        }
        XCTAssertEqual(wrong, [])
        // Changing the seal key is the auditor's; the projector seals with the key it is given.
        let handover = "audit.add_key_handover(bigint, text, bytea, timestamptz, bytea)"
        XCTAssertEqual(try Self.roles.filter { try db.query("select has_function_privilege($1, $2, 'execute')", [$0, handover]).scalar(Bool.self) },
                       ["permaudit_auditor"])

        // The analyst's conditions run after the view's join (036): a failing cast on the install
        // id (`where subject = 'x' and subject::int = 0`) cannot probe the link table for installs
        // that have no state. Whether a plain view leaks depends on the plan the table sizes
        // give, so the view's option is what is checked.
        XCTAssertEqual(try db.query("select reloptions::text from pg_class where oid = 'analytics.permission_state'::regclass")
            .scalar(String?.self), "{security_barrier=true}")

        // The owner cannot log in; the log refuses changes even to a superuser in replica mode.
        let owner: String = try db.query("select pg_get_userbyid(relowner)::text from pg_class where oid = 'audit.events'::regclass").scalar()
        XCTAssertEqual(owner, "permaudit_owner")
        XCTAssertFalse(try db.query("select rolcanlogin from pg_roles where rolname = $1", [owner]).scalar(Bool.self))
        try db.execute("set session_replication_role = replica")
        for (sql, hint) in [("update audit.events set app = app", "audit.append_events"), ("delete from audit.events", "audit.append_events"),
                            ("truncate audit.events", "audit.append_events"), ("delete from audit.seals", "audit.add_seal"),
                            ("truncate audit.key_handovers", "audit.add_key_handover"),
                            ("delete from audit.erasures", "audit.erase_subject"), ("truncate audit.access_log", "audit.record_access"),
                            // The link table changes only by erasure (032).
                            ("update audit.subject_streams set subject = subject || 'x'", "audit.erase_subject"),
                            ("delete from audit.subject_streams", "audit.erase_subject"),
                            ("truncate audit.subject_streams", "audit.erase_subject")] {
            XCTAssertThrowsError(try db.execute(sql), sql) { error in
                XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA010", sql)
                XCTAssertTrue((error as? PostgresError)?.hint?.contains(hint) == true, sql)
            }
        }
        try db.execute("set session_replication_role = origin")
        try db.execute("update audit.subject_streams set app = app")  // no change: the write path's row lock
        // A delete needs a record of its erasure, whatever the session sets (032 trusted a setting).
        try db.execute("begin")
        try db.execute("set local permaudit.erasing = on")
        XCTAssertThrowsError(try db.execute("delete from audit.subject_streams where subject = 'matrix-1'")) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA010")
        }
        try db.execute("rollback")
        let erased: Int = try db.query("select audit.erase_subject('com.example.app', 'matrix-1', 'test')").scalar()
        XCTAssertEqual(try db.query("select count(*)::int from audit.erasures where stream_key = $1", [erased]).scalar(Int.self), 1)
        // An erased stream cannot be linked again, to the same install or another (035).
        for subject in ["matrix-1", "someone-else"] {
            let relink = "insert into audit.subject_streams (stream_key, app, subject) overriding system value values (\(erased), 'com.example.app', '\(subject)')"
            XCTAssertThrowsError(try db.execute(relink)) { error in
                XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA010")
            }
        }
        // The install's next event starts a new stream.
        XCTAssertEqual(try EventLog(connection: db).append([EventFixtures.event(subject: "matrix-1")]).map(\.status), [.appended])
        // No sample of install ids in the planner's statistics (an erased one stayed there).
        try db.execute("analyze audit.subject_streams")
        XCTAssertEqual(try db.query("""
            select count(*)::int from pg_stats where schemaname = 'audit' and tablename = 'subject_streams' and attname = 'subject'
            """).scalar(Int.self), 0)
    }

    /// The access record names the role a caller took with SET ROLE, and the login.
    func testTheAccessRecordNamesTheRoleAndTheLogin() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let login: String = try db.query("select session_user::text").scalar()
        try db.query("select audit.record_access('as the login', '{}')")
        try db.execute("set role permaudit_auditor")
        try db.query("select audit.record_access('as the auditor', '{}')")
        _ = try db.query("select count(*) from audit.subject_events('com.example.app', 'nobody')")
        try db.execute("reset role")
        let rows = try db.query("select command, role_name, login_name from audit.access_log order by access_id").decode((String, String, String).self)
        XCTAssertEqual(rows.map { [$0.0, $0.1, $0.2] }, [["as the login", login, login], ["as the auditor", "permaudit_auditor", login],
                                                         ["audit.subject_events", "permaudit_auditor", login]])
        // So does the server log's line of the access request (032).
        let log = try String(contentsOf: try TestDatabase.cluster.logFile, encoding: .utf8)
        XCTAssertTrue(log.contains("permaudit access request: audit.subject_events by permaudit_auditor, app com.example.app, 0 events"))
        // An erasure logs every call too: rolled back, it still told its caller the stream key (035).
        let (subject, app) = ("logged-\(UUID())", "com.example.\(UUID())")  // not in the log of an earlier run
        try EventLog(connection: db).append([EventFixtures.event(subject: subject, app: app)])
        try db.execute("begin")
        try db.execute("set local role permaudit_auditor")
        let key: Int = try db.query("select audit.erase_subject($1, $2, 'probe')", [app, subject]).scalar()
        try db.execute("rollback")
        let after = try String(contentsOf: try TestDatabase.cluster.logFile, encoding: .utf8)
        XCTAssertTrue(after.contains("permaudit erasure: audit.erase_subject by permaudit_auditor, app \(app), stream \(key)"))
        XCTAssertFalse(after.contains(subject))
    }
}
