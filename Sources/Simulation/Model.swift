import PermissionEvents

/// The world the simulator draws from: apps, platforms, OS and app versions, and the true
/// behaviour of users at each screen. A report built from simulated traffic can be checked
/// against these numbers.
public struct Model: Sendable {
    public struct App: Sendable {
        public var id: String
        /// Share of the app's installs that are iOS.
        public var iosShare: Double
        /// Share of all simulated installs.
        public var weight: Double
        /// Flows and how often a session uses each.
        public var flows: [(name: String, weight: Double)]
        /// App versions, oldest first; later versions open the system picker more often.
        public var versions: [String]
        /// Runs the pre-permission experiment on each install's first permission attempt.
        public var runsExperiment: Bool
        /// Shows its pre-permission screen before every system dialog.
        public var alwaysPrimes: Bool
    }

    public var apps: [App] = [
        App(id: "com.example.snap", iosShare: 0.55, weight: 0.45,
            flows: [("avatar", 0.3), ("chatAttachment", 0.3), ("editorSave", 0.4)],
            versions: ["6.0.0", "6.1.0", "6.2.0", "6.3.0", "6.4.0"], runsExperiment: true, alwaysPrimes: false),
        App(id: "com.example.vault", iosShare: 0.40, weight: 0.25,
            flows: [("backup", 0.6), ("gallery", 0.4)],
            versions: ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0"], runsExperiment: true, alwaysPrimes: false),
        App(id: "com.example.chat", iosShare: 0.50, weight: 0.30,
            flows: [("chatAttachment", 0.7), ("avatar", 0.3)],
            versions: ["9.0.0", "9.1.0", "9.2.0", "9.3.0", "9.4.0"], runsExperiment: false, alwaysPrimes: true),
    ]
    /// Install share of each app version (oldest first).
    public var versionWeights: [Double] = [0.10, 0.15, 0.20, 0.25, 0.30]
    /// iOS majors and Android API levels in use, with their shares.
    public var iosMajors: [(major: Int, weight: Double)] = [(15, 0.05), (16, 0.15), (17, 0.35), (18, 0.45)]
    public var androidMajors: [(major: Int, weight: Double)] = [(11, 0.08), (12, 0.12), (13, 0.25), (14, 0.35), (15, 0.20)]

    /// The experiment: key, and the share of installs in the treatment variant.
    public var experimentKey = "priming-2026"
    public var treatmentShare = 0.5

    /// Probability that the user denies at a system dialog, by platform, without and with a
    /// pre-permission screen (accepted) before it. Each dialog is an independent draw.
    public var denyUnprimed: [Platform: Double] = [.ios: 0.32, .android: 0.38]
    public var denyPrimed: [Platform: Double] = [.ios: 0.15, .android: 0.20]
    /// Probability of "Select Photos" (iOS .readWrite) / "Select photos and videos" (Android 14+)
    /// at a dialog that is not a denial's, as a share of all answers.
    public var limited: [Platform: Double] = [.ios: 0.20, .android: 0.15]
    /// Probability that the user continues at the pre-permission screen.
    public var acceptPrePermission = 0.90
    /// Share of iOS devices under parental controls / MDM (every request answers restricted).
    public var restrictedShare = 0.02

    /// Probability that a picker-capable flow (avatar, chatAttachment) opens the system picker,
    /// by app version index: grows with each release.
    public func pickerShare(versionIndex: Int) -> Double { 0.25 + 0.15 * Double(versionIndex) }
    public var pickerFlows: Set<String> = ["avatar", "chatAttachment"]
    public var pickerCompletes = 0.8

    /// After a denial: the app sends the user to Settings, and the user grants there.
    public var settingsOpened = 0.4
    public var grantInSettings = 0.35
    /// Per session: a granted user revokes access in Settings; the app reads the status.
    public var revokeInSettings = 0.01
    public var observeStatus = 0.5

    /// Delivery: sessions queued offline and sent hours or days later; sessions whose events are
    /// sent in reverse order; re-sent events; events from a buggy client that break the contract.
    public var offlineSession = 0.04
    public var reversedSession = 0.02
    public var resent = 0.004
    public var malformed = 0.0003

    public init() {}

    /// Probability that a dialog gives access (granted or limited) on this platform.
    public func accessAtDialog(_ platform: Platform, primed: Bool) -> Double {
        1 - (primed ? denyPrimed : denyUnprimed)[platform]!
    }

    /// Expected access rate of an install's first permission attempt in each experiment arm on a
    /// platform (intention to treat: a declined pre-permission screen is no access).
    public func experimentAccess(_ platform: Platform, treatment: Bool) -> Double {
        let device = platform == .ios ? 1 - restrictedShare : 1
        return treatment ? acceptPrePermission * device * accessAtDialog(platform, primed: true)
                         : device * accessAtDialog(platform, primed: false)
    }
}
