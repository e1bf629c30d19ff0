import Foundation

/// What tests and `permaudit bench dashboards` need of a Grafana dashboard JSON file: its uid and
/// title, its query variables, and every panel's SQL targets.
public struct Dashboard: Sendable {
    public struct Variable: Sendable {
        public var name: String
        /// The SQL that lists the options.
        public var query: String
        public var multi: Bool
        public var includeAll: Bool
        /// The custom value "All" stands for (Grafana inserts it as written, unquoted); nil: all
        /// the options' values.
        public var allValue: String?
        /// When Grafana reloads the options: 1 on dashboard load, 2 on time range change.
        public var refresh: Int
    }

    public struct Target: Sendable {
        public var panelTitle: String
        public var panelType: String
        public var refId: String
        public var rawSQL: String
        /// `time_series` or `table`.
        public var format: String
        public var datasourceUID: String?
        /// The panel's minimum interval ("1d"), the lower bound of `$__interval`.
        public var minInterval: String?
    }

    public var file: String
    public var uid: String
    public var title: String
    public var variables: [Variable]
    public var targets: [Target]

    public init(contentsOf url: URL) throws {
        file = url.lastPathComponent
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: url))
        guard let root = object as? [String: Any], let uid = root["uid"] as? String, let title = root["title"] as? String else {
            throw GrafanaQueryError("\(url.lastPathComponent): not a dashboard (no uid or title)")
        }
        self.uid = uid
        self.title = title
        let list = (root["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? []
        variables = list.filter { $0["type"] as? String == "query" }.map { item in
            let query = item["query"] as? String ?? (item["query"] as? [String: Any])?["rawSql"] as? String ?? ""
            let allValue = (item["allValue"] as? String).flatMap { $0.isEmpty ? nil : $0 }
            return Variable(name: item["name"] as? String ?? "", query: query,
                            multi: item["multi"] as? Bool ?? false, includeAll: item["includeAll"] as? Bool ?? false,
                            allValue: allValue, refresh: item["refresh"] as? Int ?? 0)
        }
        var targets: [Target] = []
        func collect(_ panels: [[String: Any]]) {
            for panel in panels {
                collect(panel["panels"] as? [[String: Any]] ?? [])  // panels inside a collapsed row
                let panelDatasource = (panel["datasource"] as? [String: Any])?["uid"] as? String
                for target in panel["targets"] as? [[String: Any]] ?? [] {
                    targets.append(Target(
                        panelTitle: panel["title"] as? String ?? "", panelType: panel["type"] as? String ?? "",
                        refId: target["refId"] as? String ?? "", rawSQL: target["rawSql"] as? String ?? "",
                        format: target["format"] as? String ?? "time_series",
                        datasourceUID: (target["datasource"] as? [String: Any])?["uid"] as? String ?? panelDatasource,
                        minInterval: panel["interval"] as? String))
                }
            }
        }
        collect(root["panels"] as? [[String: Any]] ?? [])
        self.targets = targets
    }

    /// Every `*.json` dashboard in `directory`, by file name.
    public static func load(directory: URL) throws -> [Dashboard] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }.sorted()
            .map { try Dashboard(contentsOf: directory.appendingPathComponent($0)) }
    }

    /// The repository's dashboards directory: `$PERMAUDIT_DASHBOARDS_DIR`, else the nearest
    /// `dashboards/dashboards` above the working directory.
    public static func locateDirectory() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["PERMAUDIT_DASHBOARDS_DIR"], !path.isEmpty {
            return URL(fileURLWithPath: path)
        }
        var directory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        while true {
            let candidate = directory.appendingPathComponent("dashboards/dashboards")
            if FileManager.default.fileExists(atPath: candidate.path) { return candidate }
            if directory.path == "/" { break }
            directory.deleteLastPathComponent()
        }
        throw GrafanaQueryError("no dashboards/dashboards directory above the working directory; set PERMAUDIT_DASHBOARDS_DIR")
    }
}
