/// The event types of the catalogue (domain contract v1, section 3).
public enum EventType: String, CaseIterable, Sendable {
    case prePermissionShown = "prePermission.shown"
    case prePermissionAccepted = "prePermission.accepted"
    case prePermissionDeclined = "prePermission.declined"
    case permissionPrompted = "permission.prompted"
    case permissionGranted = "permission.granted"
    case permissionLimited = "permission.limited"
    case permissionDenied = "permission.denied"
    case permissionRestricted = "permission.restricted"
    case pickerOpened = "picker.opened"
    case pickerCompleted = "picker.completed"
    case pickerCancelled = "picker.cancelled"
    case limitedSelectionChanged = "limitedSelection.changed"
    case permissionStatusObserved = "permission.statusObserved"
    case settingsOpened = "settings.opened"

    /// Whether the event must, may or must not carry a field.
    public enum Presence: Sendable { case required, optional, absent }

    public var attempt: Presence {
        switch self {
        case .limitedSelectionChanged, .permissionStatusObserved, .settingsOpened: return .optional
        default: return .required
        }
    }

    public var permission: Presence {
        switch self {
        case .pickerOpened, .pickerCompleted, .pickerCancelled: return .absent
        default: return .required
        }
    }

    /// The type-specific attributes this type defines.
    public var attributes: [AttributeRule] {
        switch self {
        case .prePermissionShown: return [.init("screen", .string, required: false)]
        case .permissionPrompted: return [.init("dialogShown", .boolean, required: false)]
        case .permissionDenied: return [.init("permanent", .boolean, required: false)]
        case .pickerOpened:
            return [.init("picker", .oneOf(["phpicker", "androidPhotoPicker", "androidOpenDocument"]), required: true),
                    .init("selectionLimit", .integer(minimum: 0), required: false)]
        case .pickerCompleted: return [.init("selectedCount", .integer(minimum: 1), required: true)]
        case .limitedSelectionChanged:
            return [.init("trigger", .oneOf(["app", "system", "settings"]), required: true),
                    .init("selectedCount", .integer(minimum: 0), required: false)]
        case .permissionStatusObserved:
            return [.init("status", .oneOf(PermissionState.allCases.map(\.rawValue)), required: true)]
        default: return []
        }
    }
}

/// One type-specific attribute and the rule its value follows.
public struct AttributeRule: Sendable {
    public enum Kind: Sendable, Equatable {
        case string
        case boolean
        case integer(minimum: Int)
        case oneOf([String])
    }

    public var name: String
    public var kind: Kind
    public var required: Bool

    public init(_ name: String, _ kind: Kind, required: Bool) {
        self.name = name
        self.kind = kind
        self.required = required
    }
}

public enum Platform: String, CaseIterable, Sendable {
    case ios, android
}

/// The permissions of the wire format; `ios.*` only with iOS, `android.*` only with Android.
public enum Permission: String, CaseIterable, Sendable {
    case iosReadWrite = "ios.photos.readWrite"
    case iosAddOnly = "ios.photos.addOnly"
    case androidImages = "android.READ_MEDIA_IMAGES"
    case androidVideo = "android.READ_MEDIA_VIDEO"
    case androidUserSelected = "android.READ_MEDIA_VISUAL_USER_SELECTED"
    case androidReadExternal = "android.READ_EXTERNAL_STORAGE"
    case androidWriteExternal = "android.WRITE_EXTERNAL_STORAGE"

    public var platform: Platform { rawValue.hasPrefix("ios.") ? .ios : .android }
}

/// A permission's state as the analytics see it.
public enum PermissionState: String, CaseIterable, Sendable {
    case notDetermined, granted, limited, denied, restricted
}
