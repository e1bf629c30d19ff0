import Foundation

let version = "0.1.0"

let commands: [any Command.Type] = [
    DbCommand.self, MigrateCommand.self, AppendCommand.self, IngestCommand.self, EventsCommand.self, ProjectCommand.self, StatsCommand.self,
    SimulateCommand.self, ReportCommand.self, DemoCommand.self, AuditCommand.self, ServeCommand.self, KeysCommand.self, BenchCommand.self,
]

let topHelp = """
    OVERVIEW: PermissionAudit: the event-sourced log of photo-library permission requests, and the analytics on it.

    USAGE: permaudit <subcommand>

    OPTIONS:
      --version                 Show the version.
      -h, --help                Show help information.

    SUBCOMMANDS:
    \(commands.map { "  " + $0.name.padding(toLength: 26, withPad: " ", startingAt: 0) + $0.abstract }.joined(separator: "\n"))

      See 'permaudit help <subcommand>' for detailed help.
    """

@MainActor func main() -> Int32 {
    var arguments = Array(CommandLine.arguments.dropFirst())
    guard let first = arguments.first else {
        print(topHelp)
        return 0
    }
    if first == "--version" {
        guard arguments.count == 1 else {
            printError("Error: unexpected argument '\(arguments[1])' after '--version'\nUsage: permaudit --version")
            return 64
        }
        print(version)
        return 0
    }
    if first == "-h" || first == "--help" { print(topHelp); return 0 }
    if first == "help" {
        guard arguments.count > 1, arguments[1] != "help" else { print(topHelp); return 0 }
        guard let command = commands.first(where: { $0.name == arguments[1] }) else {
            printError("Error: unknown subcommand '\(arguments[1])'\nUsage: permaudit help <subcommand>\n  See 'permaudit --help'.")
            return 64
        }
        print(command.help, terminator: "")
        return 0
    }
    guard let command = commands.first(where: { $0.name == first }) else {
        let what = first.hasPrefix("-") ? "option" : "subcommand"
        printError("Error: unknown \(what) '\(first)'\nUsage: permaudit <subcommand>\n  See 'permaudit --help'.")
        return 64
    }
    arguments.removeFirst()
    if arguments.contains("-h") || arguments.contains("--help") {
        print(command.help, terminator: "")
        return 0
    }
    do {
        let parsed = try ParsedArguments(arguments, valueOptions: command.valueOptions, flagOptions: command.flagOptions, usage: command.usage)
        return try command.run(parsed)
    } catch let error as UsageError {
        printError("Error: \(error.message)\nUsage: \(error.usage)\n  See 'permaudit help \(command.name)'.")
        return 64
    } catch let error as CommandFailure {
        printError("Error: \(error.message)")
        return error.exitCode
    } catch {
        // AppendError, PostgresError and the others describe themselves without payloads.
        printError("Error: \(describe(error))")
        return 1
    }
}

// A standard descriptor the caller closed (`<&-`, `2>&-`) would be taken by the next file or
// socket opened: ingest read its input from the database connection, and errors went into it.
for descriptor: Int32 in 0...2 where fcntl(descriptor, F_GETFD) == -1 && errno == EBADF {
    _ = open("/dev/null", O_RDWR)
}
exit(main())
