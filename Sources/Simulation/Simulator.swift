import Foundation
import PermissionEvents

/// Realistic synthetic traffic in wire format v1, deterministic by seed.
///
/// Each install (app, subject) has a platform, an OS and app version, an experiment variant and
/// a permission state per permission, and lives through a few sessions over the period. In a
/// session the app may read the permission status, and the user uses one to three features
/// (flows), each of which opens the system picker or asks for a permission, with or without a
/// pre-permission screen, as `Model` says. The events are then delivered the way mobile clients
/// deliver them: mostly within seconds, some sessions hours or days later (offline), some sessions
/// in reverse order, some events twice, and a few broken by a buggy client.
///
///     let run = Simulator(seed: 7, subjects: 20_000, days: 28, start: start).run()
///     run.lines    // NDJSON lines in delivery order
///     run.truth    // the parameters and what was generated, to check a report against
public struct Simulator {
    public var model: Model
    public var seed: UInt64
    public var subjects: Int
    public var days: Int
    /// Start of the period (UTC), in milliseconds since 1970.
    public var start: Int64

    public init(model: Model = Model(), seed: UInt64, subjects: Int, days: Int, start: Int64) {
        self.model = model
        self.seed = seed
        self.subjects = subjects
        self.days = days
        self.start = start
    }

    /// The first day, `YYYY-MM-DD`.
    public var startDate: String {
        var clock = TimestampFormatter()
        return clock.date(day: Int(start / 86_400_000))
    }

    public struct Run: Sendable {
        public var lines: [String]
        public var truth: Truth
    }

    /// Generates the whole period and returns its lines in delivery order.
    public func run() -> Run {
        var rng = SplitMix64(seed: seed)
        var world = World(model: model)
        let end = start + Int64(days) * 86_400_000
        var out: [Line] = []
        for index in 0..<subjects {
            var install = world.newInstall(index: index, rng: &rng)
            var t = start + Int64(rng.unit() * Double(end - start))
            var sessions = 0
            repeat {
                var events = world.session(&install, at: t, rng: &rng)
                sessions += 1
                world.deliver(&events, offline: rng.chance(model.offlineSession), rng: &rng)
                out.append(contentsOf: events)
                t += Int64(rng.exponential(mean: 2 * 86_400_000)) + 600_000
            } while t < end && !rng.chance(0.35)
            world.truth.sessions += sessions
        }
        out.sort { ($0.deliverAt, $0.sequence) < ($1.deliverAt, $1.sequence) }
        var truth = world.truth
        truth.subjects = subjects
        truth.countLate(out)
        return Run(lines: out.map(\.json), truth: truth)
    }

    /// Live traffic: sessions of a pool of `subjects` installs happening now, for a collector or
    /// dashboard demo. Calls `emit` with each session's events (occurredAt from `now()`).
    public func live(now: () -> Int64, emit: ([String]) throws -> Bool) rethrows {
        var rng = SplitMix64(seed: seed)
        var world = World(model: model)
        var installs: [Install] = []
        while true {
            // New installs join (a third of the sessions) until the pool holds `subjects`.
            if installs.isEmpty || (installs.count < subjects && rng.chance(1.0 / 3)) {
                installs.append(world.newInstall(index: installs.count, rng: &rng))
            }
            let slot = Int(rng.next() % UInt64(installs.count))
            let events = world.session(&installs[slot], at: now(), rng: &rng)
            guard try emit(events.map(\.json)) else { return }
        }
    }
}

/// One generated line: its event time, when the client sends it, and the JSON.
struct Line {
    var occurredAt: Int64
    var deliverAt: Int64
    var sequence: Int
    var stream: Int
    var json: String
    /// False for lines the write path refuses (a broken event).
    var valid: Bool
    /// False for a re-send of an event already delivered.
    var original: Bool
}

/// What the model's actors know about one install.
struct Install {
    var app: Int
    var index: Int
    var subject: String
    var platform: Platform
    var osMajor: Int
    var osVersion: String
    var versionIndex: Int
    var treatment: Bool
    var restricted: Bool
    /// The system picker this device opens: the same in every session.
    var picker: String
    var experimentDone = false
    var states: [String: PermissionState] = [:]
}

struct PermissionState {
    enum Status: String { case notDetermined, granted, limited, denied, restricted }
    var status = Status.notDetermined
    var denials = 0
}

/// The generator's mutable parts: the model, the sequence counter and the truth tally.
struct World {
    let model: Model
    var sequence = 0
    var truth: Truth
    var clock = TimestampFormatter()

    init(model: Model) {
        self.model = model
        truth = Truth(model: model)
    }

    mutating func newInstall(index: Int, rng: inout SplitMix64) -> Install {
        let app = rng.pick(model.apps.map(\.weight))
        let platform: Platform = rng.chance(model.apps[app].iosShare) ? .ios : .android
        let majors = platform == .ios ? model.iosMajors : model.androidMajors
        let major = majors[rng.pick(majors.map(\.weight))].major
        let osVersion = platform == .ios ? "\(major).\(rng.next() % 6).\(rng.next() % 3)" : "\(major)"
        let subject = "inst-" + String(rng.uuid().replacingOccurrences(of: "-", with: "").prefix(16))
        // Android 13+ has the photo picker built in; older devices get it through Google Play
        // services, and those without fall back to ACTION_OPEN_DOCUMENT.
        let picker = platform == .ios ? "phpicker" : major < 13 && rng.chance(0.1) ? "androidOpenDocument" : "androidPhotoPicker"
        return Install(app: app, index: index, subject: subject, platform: platform, osMajor: major, osVersion: osVersion,
                       versionIndex: rng.pick(model.versionWeights), treatment: rng.chance(model.treatmentShare),
                       restricted: platform == .ios && rng.chance(model.restrictedShare), picker: picker)
    }

    /// One session at time `t`: status reads, then one to three feature uses.
    mutating func session(_ install: inout Install, at t: Int64, rng: inout SplitMix64) -> [Line] {
        var events = EventBuilder(install: install, app: model.apps[install.app], clock: clock)
        defer { clock = events.clock }
        var clock = t
        for permission in install.states.keys.sorted() {
            if install.states[permission]!.status == .granted && rng.chance(model.revokeInSettings) {
                install.states[permission]!.status = .denied
            }
            if rng.chance(model.observeStatus) {
                events.add("permission.statusObserved", at: clock, permission: permission,
                           attributes: "{\"status\":\"\(install.states[permission]!.status.rawValue)\"}", rng: &rng)
                clock += 200
            }
        }
        let uses = 1 + Int(rng.next() % 3)
        for _ in 0..<uses {
            clock += 5_000 + Int64(rng.unit() * 120_000)
            clock = use(&install, &events, at: clock, rng: &rng)
        }
        var lines: [Line] = []
        for (json, at) in events.events {
            lines.append(Line(occurredAt: at, deliverAt: at, sequence: sequence, stream: install.index, json: json, valid: true, original: true))
            sequence += 1
            if rng.chance(model.malformed) {
                lines.append(Line(occurredAt: at, deliverAt: at, sequence: sequence, stream: install.index,
                                  json: EventBuilder.broken(json, kind: Int(rng.next() % 3), eventId: rng.uuid()),
                                  valid: false, original: true))
                sequence += 1
                truth.malformedLines += 1
            }
        }
        truth.events += events.events.count
        return lines
    }

    /// One feature use: a picker attempt, a permission attempt, or nothing to log.
    private mutating func use(_ install: inout Install, _ events: inout EventBuilder, at start: Int64, rng: inout SplitMix64) -> Int64 {
        let app = model.apps[install.app]
        let flow = app.flows[rng.pick(app.flows.map(\.weight))].name
        var t = start
        func step() -> Int64 { t += 800 + Int64(rng.unit() * 6_000); return t }
        events.beginAttempt(flow: flow, attempt: rng.uuid())

        if model.pickerFlows.contains(flow) && rng.chance(model.pickerShare(versionIndex: install.versionIndex)) {
            let limit = rng.next() % 2 == 0 ? 1 : 0  // one item, or unlimited
            events.add("picker.opened", at: t, attributes: "{\"picker\":\"\(install.picker)\",\"selectionLimit\":\(limit)}", rng: &rng)
            if rng.chance(model.pickerCompletes) {
                let count = limit == 1 ? 1 : 1 + rng.next() % 5
                events.add("picker.completed", at: step(), attributes: "{\"selectedCount\":\(count)}", rng: &rng)
            } else {
                events.add("picker.cancelled", at: step(), rng: &rng)
            }
            return t
        }

        let permission: String
        switch (install.platform, flow) {
        case (.ios, "editorSave"): permission = "ios.photos.addOnly"
        case (.ios, _): permission = "ios.photos.readWrite"
        case (.android, "editorSave"): return t   // saving needs no permission on Android 10+
        case (.android, _): permission = install.osMajor >= 13 ? "android.READ_MEDIA_IMAGES" : "android.READ_EXTERNAL_STORAGE"
        }
        // .addOnly asked while .readWrite is granted: authorized at once, without a dialog.
        if permission == "ios.photos.addOnly" && install.states["ios.photos.readWrite"]?.status == .granted
            && install.states[permission]?.status != .granted {
            events.add("permission.prompted", at: t, permission: permission, attributes: "{\"dialogShown\":false}", rng: &rng)
            events.add("permission.granted", at: step(), permission: permission, rng: &rng)
            install.states[permission, default: PermissionState()].status = .granted
            return t
        }
        var state = install.states[permission] ?? PermissionState()
        defer {
            install.states[permission] = state
            // Granting .readWrite also grants .addOnly (after a denied .addOnly too).
            if permission == "ios.photos.readWrite" && state.status == .granted && install.states["ios.photos.addOnly"] != nil {
                install.states["ios.photos.addOnly"]!.status = .granted
            }
        }
        switch state.status {
        case .granted, .restricted:
            return t
        case .limited:
            if install.platform == .ios && rng.chance(0.15) {
                events.add("limitedSelection.changed", at: t, permission: permission,
                           attributes: "{\"trigger\":\"app\",\"selectedCount\":\(rng.next() % 8)}", rng: &rng)
            }
            return t
        case .notDetermined, .denied:
            break
        }

        // A permission attempt.
        let inExperiment = app.runsExperiment && !install.experimentDone
        if inExperiment {
            install.experimentDone = true
            events.experiment = "{\"\(model.experimentKey)\":\"\(install.treatment ? "treatment" : "control")\"}"
            truth.countExperimentAttempt(app: app.id, treatment: install.treatment, platform: install.platform)
        }
        defer { events.experiment = nil }
        let primed = app.alwaysPrimes || (inExperiment && install.treatment)
        if primed {
            events.add("prePermission.shown", at: t, permission: permission, attributes: "{\"screen\":\"photos-explainer\"}", rng: &rng)
            guard rng.chance(model.acceptPrePermission) else {
                events.add("prePermission.declined", at: step(), permission: permission, rng: &rng)
                return t
            }
            events.add("prePermission.accepted", at: step(), permission: permission, rng: &rng)
            _ = step()
        }

        if install.restricted {
            events.add("permission.prompted", at: t, permission: permission, attributes: "{\"dialogShown\":false}", rng: &rng)
            events.add("permission.restricted", at: step(), permission: permission, rng: &rng)
            state.status = .restricted
            return t
        }
        let dialog = install.platform == .ios ? state.status == .notDetermined : state.denials < 2
        if !dialog {
            // iOS after a denial, Android after "don't ask again": the OS answers at once.
            events.add("permission.prompted", at: t, permission: permission, attributes: "{\"dialogShown\":false}", rng: &rng)
            events.add("permission.denied", at: step(), permission: permission,
                       attributes: "{\"permanent\":\(install.platform == .android)}", rng: &rng)
        } else {
            events.add("permission.prompted", at: t, permission: permission, attributes: "{\"dialogShown\":true}", rng: &rng)
            truth.countDialog(platform: install.platform, primed: primed)
            let canLimit = permission == "ios.photos.readWrite" || (install.platform == .android && install.osMajor >= 14)
            let answer = rng.unit()
            let deny = (primed ? model.denyPrimed : model.denyUnprimed)[install.platform]!
            if answer < deny {
                state.denials += 1
                state.status = .denied
                let permanent = install.platform == .android && state.denials >= 2
                events.add("permission.denied", at: step(), permission: permission, attributes: "{\"permanent\":\(permanent)}", rng: &rng)
            } else if canLimit && answer < deny + model.limited[install.platform]! {
                state.status = .limited
                events.add("permission.limited", at: step(), permission: permission, rng: &rng)
                return t
            } else {
                state.status = .granted
                events.add("permission.granted", at: step(), permission: permission, rng: &rng)
                return t
            }
        }
        // Denied: the app may send the user to Settings, where some grant access.
        if rng.chance(model.settingsOpened) {
            events.add("settings.opened", at: step(), permission: permission, rng: &rng)
            if rng.chance(model.grantInSettings) { state.status = .granted }
        }
        return t
    }

    /// Sets when each line is sent: seconds after it happened, or hours to days for a session
    /// queued offline; some sessions go out in reverse order and some events twice.
    mutating func deliver(_ lines: inout [Line], offline: Bool, rng: inout SplitMix64) {
        guard let last = lines.last?.occurredAt else { return }
        let delay = offline ? Int64(3_600_000 + rng.unit() * 71 * 3_600_000) : 0
        for i in lines.indices {
            lines[i].deliverAt = offline ? last + delay + Int64(i) : lines[i].occurredAt + 300 + Int64(rng.unit() * 400)
        }
        if lines.count > 1 && rng.chance(model.reversedSession) {
            let times = lines.map(\.deliverAt)
            for i in lines.indices { lines[i].deliverAt = times[times.count - 1 - i] }
        }
        for line in lines where line.valid && rng.chance(model.resent) {
            var copy = line
            copy.deliverAt += 60_000 + Int64(rng.unit() * 86_400_000)
            copy.sequence = sequence
            copy.original = false
            sequence += 1
            lines.append(copy)
            truth.resentLines += 1
        }
    }
}
