import Foundation
import Postgres

/// A private PostgreSQL cluster under `$PERMAUDIT_HOME` (default `./.permaudit`), created and
/// started on first use from the installed PostgreSQL binaries, listening on a Unix socket only.
/// As root, the server runs as the unprivileged `postgres` user (PostgreSQL refuses root).
public struct EmbeddedCluster: Sendable {
    public let home: URL
    public var dataDirectory: URL { home.appendingPathComponent("pgdata") }
    public var socketDirectory: URL { home.appendingPathComponent("run") }
    public var logFile: URL { home.appendingPathComponent("postgres.log") }
    public static let databaseName = "permaudit"
    public static let superuser = "permaudit"
    public static let serverUser = "postgres"

    public init(home: URL) { self.home = home.standardizedFileURL }

    /// `$PERMAUDIT_HOME`, else `./.permaudit`.
    public static func fromEnvironment() -> EmbeddedCluster {
        let path = ProcessInfo.processInfo.environment["PERMAUDIT_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? ".permaudit"
        let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        return EmbeddedCluster(home: url.absoluteURL)
    }

    /// The libpq URL of the cluster's database (a Unix socket, no TCP).
    public var url: String {
        let host = socketDirectory.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? socketDirectory.path
        return "postgresql:///\(Self.databaseName)?host=\(host)&user=\(Self.superuser)"
    }

    /// The URL of another database in the same cluster.
    public func url(database: String) -> String {
        url.replacingOccurrences(of: "postgresql:///\(Self.databaseName)?", with: "postgresql:///\(database)?")
    }

    public enum Status: Equatable, Sendable {
        case notCreated, stopped, running(pid: Int)
    }

    public func status() throws -> Status {
        guard FileManager.default.fileExists(atPath: dataDirectory.appendingPathComponent("PG_VERSION").path) else {
            return .notCreated
        }
        let result = try pgctl(["status", "-D", dataDirectory.path])
        if result.status == 0, let pid = Self.lockFilePID(lockFile), !Self.isZombie(pid), isServer(pid, lockFile: lockFile) || socketAnswers() {
            return .running(pid: pid)
        }
        return .stopped
    }

    private var lockFile: URL { dataDirectory.appendingPathComponent("postmaster.pid") }
    /// The socket's lock file, which names the server too (the same lines as postmaster.pid).
    private var socketLockFile: URL { socketDirectory.appendingPathComponent(".s.PGSQL.5432.lock") }

    static func lockFileLines(_ file: URL) -> [Substring] {
        ((try? String(contentsOf: file, encoding: .utf8)) ?? "").split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// The process id on a lock file's first line.
    static func lockFilePID(_ file: URL) -> Int? { lockFileLines(file).first.flatMap { Int($0) } }

    /// Whether process `pid` is the server that wrote `lockFile`: it started when the lock file
    /// says the server started (line 3, seconds since the epoch; /proc/PID/stat, which any user
    /// may read, has the process's start), or it is `postgres -D` this data directory (a clock
    /// stepped since the server started moves the one time and not the other). A server that did
    /// not stop (killed, the machine halted) leaves lock files whose process id another program
    /// of the server's user may have been given since; pg_ctl counts that program as the server
    /// (and would signal it), and a new server refuses to start beside them. Where anything
    /// cannot be read, the process is taken to be the server.
    func isServer(_ pid: Int, lockFile: URL) -> Bool {
        let lines = Self.lockFileLines(lockFile)
        guard lines.count > 2, let startedAt = Double(lines[2]),
              let started = Self.processStart(pid) else { return true }
        // The process starts (fork, exec) just before the server reads the clock; a second either
        // way for the two clocks' rounding.
        if abs(started - startedAt) <= 2 { return true }
        guard let data = FileHandle(forReadingAtPath: "/proc/\(pid)/cmdline")?.readDataToEndOfFile() else { return true }
        let arguments = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard let program = arguments.first, ["postgres", "postmaster"].contains((program as NSString).lastPathComponent),
              let flag = arguments.firstIndex(of: "-D"), flag + 1 < arguments.count else { return false }
        return URL(fileURLWithPath: arguments[flag + 1]).resolvingSymlinksInPath().path == dataDirectory.resolvingSymlinksInPath().path
    }

    /// Whether a server accepts connections on the cluster's socket (in its private directory: this
    /// cluster's server, whatever its lock files say).
    func socketAnswers() -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socketDirectory.appendingPathComponent(".s.PGSQL.5432").path.utf8CString)
        guard path.count <= MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.map { UInt8(bitPattern: $0) }) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
        }
    }

    /// Removes the lock files that name a live process which is not the server (see isServer),
    /// unless a server answers on the socket. A dead process's lock file the server replaces
    /// itself.
    private func removeStaleLockFiles() {
        guard !socketAnswers() else { return }
        for file in [lockFile, socketLockFile] {
            if let pid = Self.lockFilePID(file), kill(pid_t(pid), 0) == 0 || errno == EPERM, !Self.isZombie(pid), !isServer(pid, lockFile: file) {
                try? FileManager.default.removeItem(at: file)
            }
        }
    }

    /// When process `pid` started, in seconds since the epoch: boot time (/proc/stat `btime`)
    /// plus the start in clock ticks after boot (field 22 of /proc/PID/stat).
    static func processStart(_ pid: Int) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")"),
              let system = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let boot = system.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }).flatMap({ Double($0.dropFirst(6)) })
        else { return nil }
        let fields = stat[stat.index(after: end)...].split(separator: " ")  // from field 3, the state
        guard fields.count > 19, let ticks = Double(fields[19]) else { return nil }
        return boot + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Whether the process has exited but its parent has not collected it yet (state Z in
    /// /proc/PID/stat). pg_ctl counts such a server as running, and a new server refuses to
    /// start while its lock file names it: a server killed with SIGKILL stays so until reaped.
    static func isZombie(_ pid: Int) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: end)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    /// Refuses a home the cluster cannot live in: `start` and `db status|url|stop` check it first.
    public func checkHome() throws {
        // The server's socket, run/.s.PGSQL.5432, must fit a Unix socket address (107 bytes).
        let socket = socketDirectory.appendingPathComponent(".s.PGSQL.5432").path
        guard socket.utf8.count <= 107 else {
            throw ClusterError("PERMAUDIT_HOME \(home.path) is too long: the server's socket path would be \(socket.utf8.count) bytes, and a Unix socket path is at most 107")
        }
        // libpq reads a comma in a host as a list of hosts; a line break would end the setting;
        // pg_ctl runs the server through sh -c with the paths in double quotes, where ", $, `
        // and \ are special (\\ reads as \).
        guard !socketDirectory.path.unicodeScalars.contains(where: { ",\"$`\\".unicodeScalars.contains($0) || $0.value < 0x20 || $0.value == 0x7F }) else {
            throw ClusterError("PERMAUDIT_HOME \(home.path.debugDescription) contains a comma, a double quote, $, `, a backslash or a control character, which the PostgreSQL tools cannot take in its paths")
        }
    }

    /// Creates the cluster if needed, starts it if stopped, and creates the database. Idempotent
    /// and safe to call from several processes at once (serialised by a lock file).
    @discardableResult
    public func start() throws -> String {
        try checkHome()
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        return try withLock {
            if try status() == .notCreated { try initialise() }
            try checkSettings()
            if case .running = try status() {} else {
                // A killed server not yet collected by its parent: wait for it (up to 10 s).
                let deadline = Date().addingTimeInterval(10)
                while let pid = Self.lockFilePID(lockFile), Self.isZombie(pid), Date() < deadline { usleep(100_000) }
                removeStaleLockFiles()
                try prepareRunDirectory()
                // The server inherits pg_ctl's descriptors: give it no pipe to hold open.
                let result = try pgctl(["start", "-w", "-t", "60", "-D", dataDirectory.path, "-l", logFile.path], capture: false)
                guard result.status == 0 else {
                    throw ClusterError("could not start PostgreSQL (exit \(result.status)); see \(logFile.path)\n\(result.output)")
                }
            }
            try createDatabase(Self.databaseName)
            return url
        }
    }

    /// Stops the server (fast shutdown) if it runs.
    public func stop() throws {
        guard case .running = try status() else { return }
        let result = try pgctl(["stop", "-w", "-m", "fast", "-D", dataDirectory.path])
        guard result.status == 0 else { throw ClusterError("could not stop PostgreSQL: \(result.output)") }
    }

    /// Creates a database in the cluster unless it exists (optionally from a template).
    public func createDatabase(_ name: String, template: String? = nil) throws {
        let connection = try Connection(url: url(database: "postgres"))
        let exists: Bool = try connection.query("select exists (select 1 from pg_database where datname = $1)", [name]).scalar()
        if exists { return }
        var sql = "create database " + Connection.quoteIdentifier(name)
        if let template { sql += " template " + Connection.quoteIdentifier(template) }
        do {
            try connection.execute(sql)
        } catch let error as PostgresError where error.code == .duplicateDatabase {
            return  // created meanwhile by another process
        }
    }

    /// Drops a database of the cluster (and ends its sessions), if it exists.
    public func dropDatabase(_ name: String) throws {
        let connection = try Connection(url: url(database: "postgres"))
        try connection.execute("drop database if exists \(Connection.quoteIdentifier(name)) with (force)")
    }

    // MARK: Set-up

    private var runsAsRoot: Bool { geteuid() == 0 }

    private static let settingsMarker = "# PermissionAudit embedded cluster"

    /// Creates the cluster in a staging directory that one rename makes `pgdata`: a creation
    /// that is killed half-way leaves no cluster with PostgreSQL's default settings (which
    /// listen on TCP), only a staging directory that the next creation removes. A `pgdata` that
    /// exists already (an empty directory, a mount point, a link to another disk) is created in
    /// place; checkSettings refuses it if that is interrupted.
    private func initialise() throws {
        let fm = FileManager.default
        if let target = try? fm.destinationOfSymbolicLink(atPath: dataDirectory.path), !fm.fileExists(atPath: dataDirectory.path) {
            throw ClusterError("\(dataDirectory.path) is a link to \(target), which does not exist")
        }
        let inPlace = fm.fileExists(atPath: dataDirectory.path)
        let staging = inPlace ? dataDirectory : home.appendingPathComponent("pgdata.creating")
        if !inPlace, fm.fileExists(atPath: staging.path) { try fm.removeItem(at: staging) }
        try fm.createDirectory(at: staging, withIntermediateDirectories: true)
        try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: staging.path)
        if runsAsRoot {
            try checkServerUserCanReach(home)
            _ = try run("/bin/chown", ["-R", "-H", "\(Self.serverUser):", staging.path])  // -H: through a link given as pgdata
        }
        let initdb = try PostgresBinaries.locate().path("initdb")
        let result = try runAsServer(initdb, [
            "-D", staging.path, "-U", Self.superuser, "--auth-local=trust", "--auth-host=reject", "--encoding=UTF8", "--locale=C.UTF-8",
        ])
        guard result.status == 0 else { throw ClusterError("initdb failed: \(result.output)") }
        // Unix socket only, in a private directory; sized for a 2-core developer machine.
        // A quoted value of postgresql.conf: '' for a quote (start refuses a backslash).
        let quotedSocketDirectory = socketDirectory.path.replacingOccurrences(of: "'", with: "''")
        let settings = """

            \(Self.settingsMarker)
            listen_addresses = ''
            unix_socket_directories = '\(quotedSocketDirectory)'
            unix_socket_permissions = 0700
            max_connections = 100
            shared_buffers = 256MB
            work_mem = 16MB
            maintenance_work_mem = 256MB
            wal_buffers = 16MB
            max_wal_size = 4GB
            checkpoint_timeout = 15min
            logging_collector = off
            log_min_messages = warning
            # No client data in the server log: PostgreSQL quotes the text it could not parse in an
            # error's DETAIL and CONTEXT, and logs the text of a failing statement.
            log_error_verbosity = terse
            log_min_error_statement = panic

            """
        let handle = try FileHandle(forWritingTo: staging.appendingPathComponent("postgresql.conf"))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(settings.utf8))
        try handle.synchronize()
        try handle.close()
        guard inPlace || rename(staging.path, dataDirectory.path) == 0 else {
            throw ClusterError("cannot rename \(staging.path) to \(dataDirectory.path): \(String(cString: strerror(errno)))")
        }
    }

    /// Refuses a cluster without the embedded cluster's settings: a creation killed between
    /// initdb and the settings (in place, or by a version before the staging directory) left
    /// PostgreSQL's defaults, which listen on TCP.
    private func checkSettings() throws {
        let conf = dataDirectory.appendingPathComponent("postgresql.conf")
        let text: String
        do { text = try String(contentsOf: conf, encoding: .utf8) } catch {
            throw ClusterError("cannot read \(conf.path): \(error.localizedDescription)")
        }
        guard text.contains(Self.settingsMarker) else {
            throw ClusterError("""
                \(conf.path) lacks the embedded cluster's settings (its server would listen on TCP): \
                stop it with 'permaudit db stop'; if its creation was interrupted, remove \(dataDirectory.path) and start again
                """)
        }
    }

    private func prepareRunDirectory() throws {
        try FileManager.default.createDirectory(at: socketDirectory, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: socketDirectory.path)
        if runsAsRoot {
            _ = try run("/bin/chown", ["\(Self.serverUser):", socketDirectory.path])
            if !FileManager.default.fileExists(atPath: logFile.path) {
                _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
            }
            _ = try run("/bin/chown", ["\(Self.serverUser):", logFile.path])
        }
    }

    private func checkServerUserCanReach(_ directory: URL) throws {
        let probe = try run("/usr/sbin/runuser", ["-u", Self.serverUser, "--", "/usr/bin/test", "-x", directory.path])
        if probe.status != 0 {
            throw ClusterError("""
                the server runs as user '\(Self.serverUser)', which cannot enter \(directory.path); \
                set PERMAUDIT_HOME to a directory whose parents it can traverse (e.g. under /tmp or /var/lib)
                """)
        }
    }

    private func pgctl(_ arguments: [String], capture: Bool = true) throws -> ProcessResult {
        try runAsServer(try PostgresBinaries.locate().path("pg_ctl"), arguments, capture: capture)
    }

    private func runAsServer(_ executable: String, _ arguments: [String], capture: Bool = true) throws -> ProcessResult {
        if runsAsRoot {
            return try run("/usr/sbin/runuser", ["-u", Self.serverUser, "--", executable] + arguments, capture: capture)
        }
        return try run(executable, arguments, capture: capture)
    }

    private func withLock<T>(_ body: () throws -> T) throws -> T {
        let path = home.appendingPathComponent("cluster.lock").path
        let fd = open(path, O_CREAT | O_RDWR, 0o600)
        guard fd >= 0 else { throw ClusterError("cannot open lock file \(path)") }
        defer { close(fd) }
        guard flock(fd, LOCK_EX) == 0 else { throw ClusterError("cannot lock \(path)") }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }
}

/// Where the installed PostgreSQL server binaries are (`PERMAUDIT_PG_BIN`, `pg_config --bindir`,
/// or the newest `/usr/lib/postgresql/*/bin`).
public struct PostgresBinaries: Sendable {
    public let directory: String

    public func path(_ tool: String) -> String { directory + "/" + tool }

    public static func locate() throws -> PostgresBinaries {
        let fm = FileManager.default
        var candidates: [String] = []
        if let env = ProcessInfo.processInfo.environment["PERMAUDIT_PG_BIN"], !env.isEmpty { candidates.append(env) }
        let versions = ((try? fm.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap(Int.init).sorted(by: >)
        candidates += versions.map { "/usr/lib/postgresql/\($0)/bin" }
        if let bindir = try? run("/usr/bin/env", ["pg_config", "--bindir"]), bindir.status == 0 {
            candidates.append(bindir.output.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        for candidate in candidates where fm.isExecutableFile(atPath: candidate + "/initdb") && fm.isExecutableFile(atPath: candidate + "/pg_ctl") {
            return PostgresBinaries(directory: candidate)
        }
        throw ClusterError("PostgreSQL server binaries not found (install the Debian package 'postgresql', or set PERMAUDIT_PG_BIN)")
    }
}

public struct ClusterError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

struct ProcessResult {
    var status: Int32
    var output: String
}

/// Runs a program to completion, capturing stdout and stderr together.
func run(_ executable: String, _ arguments: [String], capture: Bool = true) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    guard capture else { return ProcessResult(status: try spawnDetached(executable, arguments), output: "") }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
}

/// Runs a program that leaves a daemon behind (`pg_ctl start`): posix_spawn with every
/// descriptor above stderr closed and the standard ones on /dev/null, so the daemon holds
/// nothing of ours open; then waits for the program itself.
func spawnDetached(_ executable: String, _ arguments: [String]) throws -> Int32 {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    let open = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap { Int32($0) }
    for descriptor in open where descriptor > 2 {
        posix_spawn_file_actions_addclose(&actions, descriptor)
    }
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid = pid_t()
    let status = posix_spawn(&pid, executable, &actions, nil, argv, environ)
    guard status == 0 else { throw ClusterError("cannot run \(executable): \(String(cString: strerror(status)))") }
    var exitStatus: Int32 = 0
    while waitpid(pid, &exitStatus, 0) < 0 && errno == EINTR {}
    return (exitStatus & 0x7f) == 0 ? (exitStatus >> 8) & 0xff : 128 + (exitStatus & 0x7f)
}
