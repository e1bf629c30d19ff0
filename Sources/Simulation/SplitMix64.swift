import Foundation

/// SplitMix64: a small, fast, deterministic generator (seeded runs give identical output).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension SplitMix64 {
    /// A uniform double in [0, 1).
    public mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    /// True with probability `p`.
    public mutating func chance(_ p: Double) -> Bool { unit() < p }

    /// An index drawn with the given weights (which need not sum to 1).
    public mutating func pick(_ weights: [Double]) -> Int {
        var x = unit() * weights.reduce(0, +)
        for (i, w) in weights.enumerated() {
            if x < w { return i }
            x -= w
        }
        return weights.count - 1
    }

    /// An exponential variate with the given mean.
    public mutating func exponential(mean: Double) -> Double { -mean * log(1 - unit()) }

    /// A random version-4 UUID, lower case.
    public mutating func uuid() -> String {
        let a = next(), b = next()
        let hex = Array(String(format: "%016llx%016llx", a, b))
        let variant = ["8", "9", "a", "b"][Int(b >> 62)]  // RFC 4122 variant bits 10xx
        return String(hex[0..<8]) + "-" + String(hex[8..<12]) + "-4" + String(hex[13..<16]) + "-"
            + variant + String(hex[17..<20]) + "-" + String(hex[20..<32])
    }
}
