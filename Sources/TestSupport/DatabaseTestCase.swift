import XCTest

/// A test case whose every test gets a database of its own (`url`): a fresh copy of the migrated
/// template, or an empty database where `migrated` is false, dropped after the test.
/// Subclasses that hold connections close them in `tearDown` before calling `super.tearDown()`.
open class DatabaseTestCase: XCTestCase {
    /// The test's database.
    public var url = ""

    /// Whether the test's database starts migrated (the default) or empty.
    open class var migrated: Bool { true }

    open override func setUpWithError() throws {
        try super.setUpWithError()
        url = try TestDatabase.create(migrated: Self.migrated)
    }

    open override func tearDown() {
        if !url.isEmpty { TestDatabase.drop(url) }
        url = ""
        super.tearDown()
    }
}
