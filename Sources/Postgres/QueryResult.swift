import CLibPQ

/// The rows of one statement's result, read in text format.
///
/// Owns its `PGresult` and clears it in `deinit`
/// (https://www.postgresql.org/docs/current/libpq-exec.html).
///
///     let rows = try connection.query("select id, name from t where id > $1", [10])
///     for (id, name) in try rows.decode((Int, String?).self) { ... }
public final class QueryResult {
    private let handle: OpaquePointer

    init(owning handle: OpaquePointer) { self.handle = handle }
    deinit { PQclear(handle) }

    /// Number of rows.
    public var count: Int { Int(PQntuples(handle)) }
    public var isEmpty: Bool { count == 0 }

    /// Column names, in order.
    public var columns: [String] {
        (0..<PQnfields(handle)).map { String(cString: PQfname(handle, $0)) }
    }

    /// Rows affected by an INSERT, UPDATE, DELETE, ... (0 when not applicable).
    public var affectedRows: Int {
        Int(String(cString: PQcmdTuples(handle))) ?? 0
    }

    /// The raw text of one cell; nil for SQL NULL, and for a row or column not in the result
    /// (`value` tells them apart).
    public subscript(row: Int, column: Int) -> String? {
        guard (0..<count).contains(row), (0..<Int(PQnfields(handle))).contains(column) else { return nil }
        return cell(row, column)
    }

    /// A cell known to be in the result; nil for SQL NULL.
    private func cell(_ row: Int, _ column: Int) -> String? {
        guard PQgetisnull(handle, Int32(row), Int32(column)) == 0 else { return nil }
        return String(cString: PQgetvalue(handle, Int32(row), Int32(column)))
    }

    /// The raw text of one cell by column name; nil for SQL NULL or an unknown column.
    public subscript(row: Int, column: String) -> String? {
        guard !column.utf8.contains(0) else { return nil }  // a C string would end at the NUL
        let index = PQfnumber(handle, column)
        guard index >= 0 else { return nil }
        return self[row, Int(index)]
    }

    /// Decodes one cell; fails with the column's name and index and the target type, or when the
    /// row or column is not in the result.
    public func value<T: PostgresDecodable>(_ row: Int, _ column: Int, as type: T.Type = T.self) throws -> T {
        let columns = Int(PQnfields(handle))
        guard (0..<columns).contains(column) else {
            throw PostgresError(code: .decodingFailure, message: "cannot decode column \(column) as \(T.self): the result has \(columns) column\(columns == 1 ? "" : "s")")
        }
        guard (0..<count).contains(row) else {
            throw PostgresError(code: .decodingFailure, message: "cannot decode row \(row) as \(T.self): the result has \(count) row\(count == 1 ? "" : "s")")
        }
        guard let text = cell(row, column) else {
            if let nullable = T.postgresNull { return nullable }
            throw decodingError(column: column, type: type, text: nil)
        }
        guard let value = T(postgresText: text) else {
            throw decodingError(column: column, type: type, text: text)
        }
        return value
    }

    /// Decodes every row as a tuple of the given types, one per column from the left.
    public func decode<each T: PostgresDecodable>(_ types: (repeat each T).Type) throws -> [(repeat each T)] {
        var rows: [(repeat each T)] = []
        rows.reserveCapacity(count)
        for row in 0..<count {
            var column = 0
            func next<V: PostgresDecodable>(_ type: V.Type) throws -> V {
                defer { column += 1 }
                return try value(row, column, as: type)
            }
            rows.append((repeat try next((each T).self)))
        }
        return rows
    }

    /// Decodes one column of every row.
    public func column<T: PostgresDecodable>(_ column: Int = 0, as type: T.Type = T.self) throws -> [T] {
        try (0..<count).map { try value($0, column, as: type) }
    }

    /// Decodes the single value of a one-row, one-column result.
    public func scalar<T: PostgresDecodable>(_ type: T.Type = T.self) throws -> T {
        guard count >= 1, PQnfields(handle) >= 1 else {
            throw PostgresError(code: .decodingFailure, message: "expected one row, got \(count)")
        }
        return try value(0, 0, as: type)
    }

    private func decodingError<T>(column: Int, type: T.Type, text: String?) -> PostgresError {
        let name = String(cString: PQfname(handle, Int32(column)))
        let found = text == nil ? "NULL" : "a value"
        return PostgresError(
            code: .decodingFailure,
            message: "cannot decode column \(column) (\(name)) as \(T.self): found \(found)"
        )
    }
}

