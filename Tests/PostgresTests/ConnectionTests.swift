import Foundation
@testable import Postgres
import TestSupport
import XCTest

final class ConnectionTests: DatabaseTestCase {
    override class var migrated: Bool { false }

    func testParameterisedQueryAndTypedDecoding() throws {
        let db = try Connection(url: url)
        let rows = try db.query(
            "select $1::int + 1, $2::text, $3::bool, $4::uuid, null::text, $5::float8, '2026-10-03 09:15:27.12+00'::timestamptz",
            [41, "it's \"quoted\"; drop table x", true, UUID(uuidString: "5B0C1F4E-2D7A-4C1B-9A3E-0F6D2B8C7E11")!, 2.5]
        )
        let decoded = try rows.decode((Int, String, Bool, UUID, String?, Double, Date).self)
        XCTAssertEqual(decoded.count, 1)
        let row = decoded[0]
        XCTAssertEqual(row.0, 42)
        XCTAssertEqual(row.1, "it's \"quoted\"; drop table x")
        XCTAssertTrue(row.2)
        XCTAssertEqual(row.3.uuidString, "5B0C1F4E-2D7A-4C1B-9A3E-0F6D2B8C7E11")
        XCTAssertNil(row.4)
        XCTAssertEqual(row.5, 2.5)
        XCTAssertEqual(row.6.timeIntervalSince1970, 1_791_018_927.12, accuracy: 0.0001)
        // Arrays: each element whole, whatever commas, braces, quotes and backslashes it holds.
        let elements = ["a,b", "{c}", "it's \"q\"", "back\\slash", " d ", "", "NULL"]
        XCTAssertEqual(try db.query("select x from unnest($1::text[]) with ordinality as u(x, n) order by n", [elements])
            .decode(String.self), elements)
        XCTAssertEqual(try db.query("select array_length($1::bigint[], 1)", [[1, 2, 3]]).scalar(Int.self), 3)
        XCTAssertEqual(try db.query("select cardinality($1::text[])", [[String]()]).scalar(Int.self), 0)
    }

    /// A database whose defaults change formats, encoding, names and isolation: a connection
    /// sets what the package relies on, and decodes as on a default database.
    func testAConnectionSetsTheSessionItReliesOn() throws {
        let admin = try Connection(url: url)
        let database: String = try admin.query("select current_database()::text").scalar()
        try admin.execute("""
            create schema shadow;
            create function shadow.date_trunc(text, date) returns date language sql as 'select date ''1999-01-01''';
            alter database "\(database)" set datestyle = 'German';
            alter database "\(database)" set intervalstyle = 'sql_standard';
            alter database "\(database)" set extra_float_digits = -15;
            alter database "\(database)" set bytea_output = 'escape';
            alter database "\(database)" set standard_conforming_strings = off;
            alter database "\(database)" set search_path = shadow, public;
            alter database "\(database)" set default_transaction_isolation = 'serializable';
            alter database "\(database)" set client_encoding = 'LATIN1';
            alter database "\(database)" set timezone = 'Asia/Kolkata'
            """)
        let db = try Connection(url: url)
        let row = try db.query("""
            select '2026-10-03 09:15:27.12+00'::timestamptz, 1.0::float8 / 3, date_trunc('week', date '2026-10-03')::date::text,
                   length('\\'), 'É✓', current_setting('default_transaction_isolation'), '1850-01-01 00:00:00+00'::timestamptz
            """).decode((Date, Double, String, Int, String, String, Date).self)[0]
        XCTAssertEqual(row.0.timeIntervalSince1970, 1_791_018_927.12, accuracy: 0.0001)
        XCTAssertEqual(row.1, 1.0 / 3, "every digit")
        XCTAssertEqual(row.2, "2026-09-28", "PostgreSQL's date_trunc, not the look-alike")
        XCTAssertEqual(row.3, 1, "a backslash is a backslash")
        XCTAssertEqual(row.4, "É✓")
        XCTAssertEqual(row.5, "read committed")
        XCTAssertEqual(row.6.timeIntervalSince1970, -3_786_825_600, "1850 in UTC, not +05:53:28")
    }

    /// The server runs on this machine here: the offset is its clock against the same clock.
    func testClockOffsetIsInSeconds() throws {
        XCTAssertEqual(try Connection(url: url).clockOffset(), 0, accuracy: 1)
    }

    /// mayRead asks for every relation's SELECT with its schema's USAGE and every function's
    /// EXECUTE, and calls a name that does not exist unreadable; asking leaves the transaction
    /// usable. (In a transaction rolled back at the end: roles belong to the cluster.)
    func testMayReadAsksForEveryRelationAndFunction() throws {
        let db = try Connection(url: url)
        let role = "pa_may_read_\(UUID().uuidString.prefix(8).lowercased())"
        try db.execute("begin")
        defer { try? db.execute("rollback") }
        try db.execute("""
            create role \(role);
            create schema open_s; create schema closed_s;
            create table open_s.readable (x int); create table open_s.hidden (x int); create table closed_s.granted (x int);
            create function open_s.callable() returns int language sql as 'select 1';
            create function open_s.refused() returns int language sql as 'select 1';
            revoke execute on function open_s.refused() from public;
            grant usage on schema open_s to \(role);
            grant select on open_s.readable, closed_s.granted to \(role);
            set local role \(role);
            """)
        XCTAssertTrue(try db.mayRead(["open_s.readable"], calling: ["open_s.callable"]))
        XCTAssertTrue(try db.mayRead([]))
        XCTAssertFalse(try db.mayRead(["open_s.readable", "open_s.hidden"]), "SELECT on each")
        XCTAssertFalse(try db.mayRead(["closed_s.granted"]), "USAGE on the schema")
        XCTAssertFalse(try db.mayRead(["open_s.readable"], calling: ["open_s.refused"]), "EXECUTE on each function")
        XCTAssertFalse(try db.mayRead(["open_s.missing"]))
        XCTAssertFalse(try db.mayRead([], calling: ["open_s.missing"]))
        XCTAssertTrue(try db.mayRead(["open_s.readable", "open_s.readable"], calling: ["open_s.callable", "open_s.callable"]), "a name twice")
        XCTAssertFalse(try db.mayRead(["open_s.readable.x", "open_s.readable"]), "split at the first dot: table readable.x")
        XCTAssertEqual(try db.query("select count(*) from open_s.readable").scalar(Int.self), 0, "the transaction goes on")
    }

    func testDecodingFailureNamesColumnAndType() throws {
        let db = try Connection(url: url)
        XCTAssertThrowsError(try db.query("select 'abc' as word").column(as: Int.self)) { error in
            let message = (error as? PostgresError)?.message ?? ""
            XCTAssertTrue(message.contains("column 0 (word)"), message)
            XCTAssertTrue(message.contains("Int"), message)
        }
        XCTAssertThrowsError(try db.query("select null::int as n").scalar(Int.self))
    }

    func testACellNotInTheResultIsAnErrorNotNULL() throws {
        let db = try Connection(url: url)
        let result = try db.query("select 1 as one")
        for (row, column) in [(0, -1), (0, 1), (5, 0), (-1, 0)] {
            XCTAssertThrowsError(try result.value(row, column, as: Int?.self), "\(row), \(column)") { error in
                XCTAssertEqual((error as? PostgresError)?.code, .decodingFailure)
            }
        }
        XCTAssertThrowsError(try result.decode((Int, String?).self)) { error in
            XCTAssertEqual((error as? PostgresError)?.message, "cannot decode column 1 as Optional<String>: the result has 1 column")
        }
        XCTAssertEqual(try result.value(0, 0, as: Int?.self), 1)
        XCTAssertNil(result[Int(Int32.max) + 1, 0])
        XCTAssertNil(result[0, "one\u{0}x"])
        XCTAssertEqual(result[0, "one"], "1")
    }

    func testTextWithANULIsRefusedBeforeItIsSent() throws {
        let db = try Connection(url: url)
        try db.execute("create temporary table t (subject text)")
        // libpq takes C strings: "a\0b" would be sent as "a" and look up another install.
        for call in [
            { _ = try db.query("insert into t values ($1)", ["a\u{0}b"]) },
            { _ = try db.preparedQuery("insert into t values ($1)", ["a\u{0}b"]) },
            { try db.sendQuery("insert into t values ($1)", ["a\u{0}b"]) },
            { _ = try db.query("insert into t values ('a')\u{0}; drop table t") },
            { try db.execute("insert into t values ('a')\u{0}") },
        ] {
            XCTAssertThrowsError(try call()) { error in
                XCTAssertEqual((error as? PostgresError)?.code, .characterNotInRepertoire)
            }
        }
        XCTAssertThrowsError(try db.query("select $1::text, $2::text", ["ok", "x\u{0}"])) { error in
            XCTAssertEqual((error as? PostgresError)?.message, "parameter $2 contains a NUL character (U+0000), which PostgreSQL text cannot hold; nothing was sent")
        }
        XCTAssertThrowsError(try Connection(url: url + "\u{0}x")) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .characterNotInRepertoire)
        }
        XCTAssertEqual(try db.query("select count(*) from t").scalar(Int.self), 0)
    }

    func testMisuseIsAnErrorNotACrash() throws {
        let db = try Connection(url: url)
        XCTAssertThrowsError(try db.waitForNotification(timeout: .nan)) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .misuse)
        }
        XCTAssertThrowsError(try db.copyIn("select 1") { _ in }) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .misuse)
        }
        XCTAssertThrowsError(try db.copyOut("select 1") { _ in }) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .misuse)
        }
        // A savepoint's name is an identifier, not SQL.
        try db.execute("create temporary table t (id int)")
        try db.transaction {
            try db.savepoint("s; insert into t values (1)") { try db.query("insert into t values (2)") }
        }
        XCTAssertEqual(try db.query("select array_agg(id)::text from t").scalar(String.self), "{2}")
        XCTAssertEqual(try db.query("select 1").scalar(Int.self), 1)
    }

    func testErrorsCarrySQLStateMessageAndDetail() throws {
        let db = try Connection(url: url)
        try db.execute("create temporary table t (id int primary key)")
        try db.query("insert into t values ($1)", [1])
        XCTAssertThrowsError(try db.query("insert into t values ($1)", [1])) { error in
            guard let error = error as? PostgresError else { return XCTFail("\(error)") }
            XCTAssertEqual(error.code, .uniqueViolation)
            XCTAssertTrue(error.message.contains("duplicate key"))
            XCTAssertNotNil(error.detail)
            // The plain description never carries the detail (it may quote data).
            XCTAssertFalse(error.description.contains("(id)=(1)"))
        }
        XCTAssertTrue(db.isOpen, "an SQL error leaves the connection usable")
        XCTAssertEqual(try db.query("select 1").scalar(Int.self), 1)
    }

    func testPreparedQueriesArePreparedOnceAndAgainWhenDiscarded() throws {
        let db = try Connection(url: url)
        let sql = "select $1::int * 2, $2::text"
        XCTAssertEqual(try db.preparedQuery(sql, [21, "a"]).decode((Int, String).self)[0].0, 42)
        XCTAssertEqual(try db.preparedQuery(sql, [5, nil]).decode((Int, String?).self)[0].1, nil)
        let prepared = try db.query("select count(*)::int from pg_prepared_statements where statement = $1", [sql]).scalar(Int.self)
        XCTAssertEqual(prepared, 1, "prepared once for both calls")

        try db.execute("discard all")   // the server forgets it: prepared again
        XCTAssertEqual(try db.preparedQuery(sql, [1, "b"]).decode((Int, String).self)[0].0, 2)
        // Inside a transaction the failed statement aborts it: the error, and prepared again next time.
        try db.execute("discard all")
        try db.execute("begin")
        XCTAssertThrowsError(try db.preparedQuery(sql, [1, "b"])) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "26000")
        }
        try db.execute("rollback")
        XCTAssertEqual(try db.transaction { try db.preparedQuery(sql, [3, "c"]).decode((Int, String).self)[0].0 }, 6)

        // A statement that does not prepare throws its SQLSTATE and is not remembered.
        XCTAssertThrowsError(try db.preparedQuery("select * from no_such_table")) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "42P01")
        }
        try db.execute("create temporary table no_such_table (n int)")
        XCTAssertEqual(try db.preparedQuery("select count(*)::int from no_such_table").scalar(Int.self), 0)
        XCTAssertThrowsError(try db.preparedQuery(sql, ["x", "c"])) { error in   // a bad parameter: the error, not a retry
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "22P02")
        }
    }

    func testConnectionFailureIsReported() {
        XCTAssertThrowsError(try Connection(url: "postgresql:///nope?host=/nonexistent-dir")) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .connectionFailure)
        }
    }

    /// A password with an unescaped `/` or `@` splits the URL elsewhere: libpq then quotes a piece
    /// of it as a port or a host name, which the message leaves out.
    func testAConnectionErrorLeavesOutPiecesOfThePassword() {
        for (url, secrets) in [("postgresql://permaudit:Ab3+/xYz9QrT@localhost:5432/db", ["Ab3+", "xYz9QrT"]),
                               ("postgresql://permaudit:p@ssw0rd@localhost/db", ["ssw0rd"]),
                               ("postgresql://u:pa@ss@localhost/db", ["ss@"]),
                               ("host=/nonexistent-dir password=Secret99 port=5432", ["Secret99"])] {
            XCTAssertThrowsError(try Connection(url: url), url) { error in
                XCTAssertEqual((error as? PostgresError)?.code, .connectionFailure, url)
                for secret in secrets { XCTAssertFalse("\(error)".contains(secret), "\(url): \(error)") }
            }
        }
    }

    /// A URL libpq cannot parse is its own error, and the message leaves out the quoted URL,
    /// which holds the password.
    func testAMalformedURLIsRefusedWithoutItsPassword() {
        for url in ["postgresql://bob:SECRETPW@[bad/db", "postgresql://bob:SECRETPW@host/db?nosuchoption=1",
                    "postgresql://bob:SECRET%zzPW@host/db", "host=x password=SECRETPW bogus"] {
            XCTAssertThrowsError(try Connection(url: url), url) { error in
                let error = error as? PostgresError
                XCTAssertEqual(error?.code, .invalidConnectionString, url)
                XCTAssertEqual(error?.message.hasPrefix("invalid database URL: "), true, url)
                XCTAssertEqual(error.map { "\($0)" }?.contains("SECRET"), false, "\(url): \(error.map { "\($0)" } ?? "")")
            }
        }
    }

    func testTransactionsCommitAndRollBack() throws {
        let db = try Connection(url: url)
        try db.execute("create temporary table t (id int)")
        try db.transaction { try db.query("insert into t values (1)") }
        struct Boom: Error {}
        XCTAssertThrowsError(try db.transaction {
            try db.query("insert into t values (2)")
            throw Boom()
        })
        try db.transaction {
            try db.query("insert into t values (3)")
            _ = try? db.savepoint { try db.query("insert into t values ('x')") }
        }
        XCTAssertEqual(try db.query("select array_agg(id order by id)::text from t").scalar(String.self), "{1,3}")

        // A transaction inside a transaction would commit the caller's: refused, the outer one
        // goes on and rolls back as a whole.
        XCTAssertThrowsError(try db.transaction {
            try db.query("insert into t values (4)")
            XCTAssertThrowsError(try db.transaction { try db.query("insert into t values (5)") }) { error in
                XCTAssertEqual((error as? PostgresError)?.code, .activeSQLTransaction)
            }
            XCTAssertTrue(db.isInTransaction)
            throw Boom()
        })
        XCTAssertFalse(db.isInTransaction)
        XCTAssertEqual(try db.query("select count(*) from t where id >= 4").scalar(Int.self), 0)

        // A failed statement whose error the body caught aborts the transaction; PostgreSQL then
        // takes the COMMIT as a ROLLBACK: refused (25P02), not returned as if committed.
        XCTAssertThrowsError(try db.transaction { () -> String in
            try db.query("insert into t values (6)")
            _ = try? db.query("select 1/0")
            return "committed?"
        }) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .inFailedSQLTransaction)
        }
        XCTAssertFalse(db.isInTransaction)
        XCTAssertEqual(try db.query("select count(*) from t where id = 6").scalar(Int.self), 0)
    }

    func testCopyInAndOut() throws {
        let db = try Connection(url: url)
        try db.execute("create temporary table t (id int, name text)")
        let copied = try db.copyIn("copy t from stdin") { writer in
            for i in 0..<10_000 { try writer.write("\(i)\tname \(i)\n") }
        }
        XCTAssertEqual(copied, 10_000)
        var bytes = 0
        var rows = 0
        let out = try db.copyOut("copy (select * from t order by id) to stdout") { row in
            bytes += row.count
            rows += 1
        }
        XCTAssertEqual(out, 10_000)
        XCTAssertEqual(rows, 10_000)
        XCTAssertGreaterThan(bytes, 10_000 * 8)
        XCTAssertThrowsError(try db.copyIn("copy t from stdin") { try $0.write("not-a-number\tx\n") })
        XCTAssertEqual(try db.query("select count(*) from t").scalar(Int.self), 10_000)

        // A writer kept beyond its body (even beyond its connection) is refused, never used.
        var kept: CopyWriter?
        do {
            let other = try Connection(url: url)
            try other.execute("create temp table u (id int)")
            _ = try other.copyIn("copy u from stdin") { writer in kept = writer; try writer.write("1\n") }
        }
        XCTAssertThrowsError(try kept?.write(String(repeating: "1\n", count: 200_000))) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .objectNotInPrerequisiteState)
        }
    }

    func testListenNotify() throws {
        let listener = try Connection(url: url)
        let sender = try Connection(url: url)
        try listener.listen("permaudit_test")
        XCTAssertNil(try listener.waitForNotification(timeout: 0.1))
        try sender.notify("permaudit_test", payload: "hello")
        let notification = try listener.waitForNotification(timeout: 5)
        XCTAssertEqual(notification?.channel, "permaudit_test")
        XCTAssertEqual(notification?.payload, "hello")
        XCTAssertEqual(notification?.senderPID, sender.backendPID)
    }

    func testAsynchronousSend() throws {
        let db = try Connection(url: url)
        try db.sendQuery("select $1::int * 2", [21])
        XCTAssertEqual(try db.receiveResult().scalar(Int.self), 42)
        // Out of turn: the caller's mistake (XX0MU), not a lost connection (08006), which would
        // make a pool throw a healthy connection away.
        XCTAssertThrowsError(try db.receiveResult()) { error in XCTAssertEqual((error as? PostgresError)?.code, .misuse) }
        try db.sendQuery("select 1")
        XCTAssertThrowsError(try db.sendQuery("select 2")) { error in XCTAssertEqual((error as? PostgresError)?.code, .misuse) }
        XCTAssertEqual(try db.receiveResult().scalar(Int.self), 1)
        XCTAssertTrue(db.isOpen)
    }

    /// A backend ended under a statement in a function: the error says so without the
    /// function's SQL that the server sends along as CONTEXT.
    func testALostConnectionIsReportedWithoutTheStatementsContext() throws {
        let db = try Connection(url: url)
        let pid: Int = try db.query("select pg_backend_pid()").scalar()
        let url = self.url
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) {
            _ = try? Connection(url: url).query("select pg_terminate_backend($1)", [pid])
        }
        XCTAssertThrowsError(try db.query("do $$ begin perform pg_sleep(30); end $$")) { error in
            XCTAssertTrue("\(error)".contains("terminating connection"), "\(error)")
            XCTAssertFalse("\(error)".contains("CONTEXT") || "\(error)".contains("pg_sleep"), "\(error)")
        }
        // libpq's own text, as the connection keeps it after a loss.
        XCTAssertEqual(PostgresError.withoutContext("FATAL:  x\nCONTEXT:  SQL statement \"select\n  1\"\nPL/pgSQL function f() line 3\nserver closed the connection unexpectedly"),
                       "FATAL:  x\nserver closed the connection unexpectedly")
    }

    func testCancelEndsTheStatementInProgress() throws {
        let db = try Connection(url: url)
        try db.sendQuery("select pg_sleep(30)")
        Thread.sleep(forTimeInterval: 0.2)
        XCTAssertTrue(db.cancel())
        XCTAssertThrowsError(try db.receiveResult()) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "57014")
        }
        XCTAssertEqual(try db.query("select 1").scalar(Int.self), 1, "the connection is usable again")
    }

    func testTimestampTextRoundTrip() {
        let date = Date(timeIntervalSince1970: 1_791_018_927.120_5)
        let text = PostgresTimestamp.format(date)
        XCTAssertEqual(text, "2026-10-03T09:15:27.120500Z")
        XCTAssertEqual(PostgresTimestamp.parse(text)!.timeIntervalSince1970, date.timeIntervalSince1970, accuracy: 1e-6)
        XCTAssertEqual(PostgresTimestamp.parse("2026-10-03 11:15:27+02")!.timeIntervalSince1970, 1_791_018_927, accuracy: 1e-6)
    }

    /// Dates that PostgreSQL's text cannot carry are refused before anything is sent (they
    /// trapped converting to 64-bit microseconds); years past 9999 and the infinities go both ways.
    func testDatesOutOfRangeAreRefusedAndLargeOnesRoundTrip() throws {
        let db = try Connection(url: url)
        for seconds in [1e16, -1e16, .nan, -62_135_596_801] as [Double] {
            XCTAssertThrowsError(try db.query("select $1::timestamptz", [Date(timeIntervalSince1970: seconds)]), "\(seconds)") { error in
                XCTAssertEqual((error as? PostgresError)?.code, .datetimeFieldOverflow)
            }
            XCTAssertThrowsError(try db.query("select $1::timestamptz[]", [[Date(), Date(timeIntervalSince1970: seconds)]]))
        }
        for seconds in [1e12, -62_135_596_800, .infinity, -.infinity, 253_402_300_800] as [Double] {
            let date = Date(timeIntervalSince1970: seconds)
            XCTAssertEqual(try db.query("select $1::timestamptz", [date]).scalar(Date.self), date, "\(seconds)")
        }
        XCTAssertEqual(try db.query("select '12000-01-01 00:00:00+00'::timestamptz").scalar(Date.self),
                       Date(timeIntervalSince1970: 316_516_204_800))
    }

    /// With `responseTimeout`, statements run as without it (a parameter larger than the socket's
    /// buffer, several statements, an error among them), and a server that stops answering (its
    /// backend stopped with SIGSTOP) ends the wait with 08006 and a closed connection, where the
    /// caller's thread waited for as long as the server was stopped.
    func testAResponseTimeoutBoundsTheWaitForAHungServer() throws {
        let db = try Connection(url: url)
        db.responseTimeout = 30
        let large = String(repeating: "x", count: 2_000_000)
        XCTAssertEqual(try db.query("select length($1)", [large]).scalar(Int.self), 2_000_000)
        XCTAssertEqual(try db.preparedQuery("select $1::int + 1", [41]).scalar(Int.self), 42)
        try db.execute("create temporary table t (n int); insert into t values (1), (2)")
        XCTAssertEqual(try db.query("select count(*)::int from t").scalar(Int.self), 2)
        XCTAssertThrowsError(try db.execute("insert into t values (3); select 1/0; insert into t values (4)")) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "22012")
        }
        XCTAssertEqual(try db.query("select count(*)::int from t").scalar(Int.self), 2, "one transaction: nothing of it stayed")

        let backend = try db.query("select pg_backend_pid()").scalar(Int.self)
        XCTAssertEqual(kill(pid_t(backend), SIGSTOP), 0)
        defer { kill(pid_t(backend), SIGCONT) }
        db.responseTimeout = 1
        XCTAssertThrowsError(try db.query("select 1")) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .connectionFailure)
            XCTAssertTrue("\(error)".contains("the server did not answer within 1.0 s"), "\(error)")
        }
        XCTAssertFalse(db.isOpen)
    }
}
