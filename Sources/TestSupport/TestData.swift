import EventLog
import Postgres

extension TestDatabase {
    /// Every analytics view's rows as text, in a stable order, to compare two states of the projections.
    public static func analyticsSnapshot(_ db: Connection) throws -> [String] {
        var rows: [String] = []
        for view in ["permission_outcomes_daily", "priming_arms", "priming_arms_daily", "experiment_arms", "experiment_arms_daily",
                     "picker_adoption_daily", "permission_state", "experiment_arms_detail_daily", "picker_adoption_detail_daily",
                     "priming_arms_by_dimension_daily", "experiment_arms_by_dimension_daily", "picker_adoption_by_dimension_daily"] {
            rows += try db.query("select '\(view) ' || x::text from analytics.\(view) x order by 1").column(as: String.self)
        }
        return rows
    }

    /// Appends events through the write path in calls of `chunk` events.
    public static func append(_ events: [String], to db: Connection, chunk: Int = 500) throws {
        let log = EventLog(connection: db)
        for start in stride(from: 0, to: events.count, by: chunk) {
            try log.append(Array(events[start..<min(start + chunk, events.count)]))
        }
    }
}
